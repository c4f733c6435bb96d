"""STEM (Khanduri et al., NeurIPS 2021): what its server and client halves share (its
momentum rule, client-side only, is in client_app/algorithms/stem.py)."""

from __future__ import annotations

# STEM: the momentum d (ArrayRecord by parameter name): the clients' average from the last
# round (down; absent in the first round) and a client's momentum at its end model (up).
STEM_MOMENTUM = "stem-d"

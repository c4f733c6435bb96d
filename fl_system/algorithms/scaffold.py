"""SCAFFOLD (Karimireddy et al., ICML 2020): what its server and client halves share."""

from __future__ import annotations

# SCAFFOLD: the server's control variate c (down), a client's change of c_i (up).
SCAFFOLD_C = "scaffold-c"
SCAFFOLD_DELTA_C = "scaffold-delta-c"

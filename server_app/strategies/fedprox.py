"""FedProx (Li et al., 2020): FedAvg's server; the proximal term lives on the client.

See `client_app/algorithms/fedprox.py` for the local objective F_k(w) + mu/2 ||w - w_t||^2.
"""

from __future__ import annotations

from server_app.strategies.fedavg import FedAvg


class FedProx(FedAvg):
    """Server half of FedProx: identical to FedAvg's size-weighted averaging."""

    partial_work = True  # the proximal term bounds partial work's drift (FedProx's own premise)

"""FedProx (Li et al., 2020): FedAvg's server; the proximal term lives on the client.

See `client_app/algorithms/fedprox.py` for the local objective F_k(w) + mu/2 ||w - w_t||^2.
"""

from __future__ import annotations

from typing import Unpack

from server_app.federated.experiment_binding import Common
from server_app.strategies.fedavg import FedAvg


class FedProx(FedAvg):
    """Server half of FedProx: identical to FedAvg's size-weighted averaging.

    Parameters
    ----------
    mu : Optional[float] (default: 0.01)
        The proximal term's weight in the clients' objective F_k(w) + mu/2 ||w - w_t||^2.
    **common
        The arguments every strategy takes (`FederatedStrategy`).
    """

    partial_work = True  # the proximal term bounds partial work's drift (FedProx's own premise)

    def __init__(self, *, mu: float | None = None, **common: Unpack[Common]) -> None:
        super().__init__(settings={"algorithm.mu": mu}, **common)

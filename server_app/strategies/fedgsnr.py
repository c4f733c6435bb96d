"""FedGSNR (Algorithm 1 of the paper): FedAvg with the GSNR step schedule switched on. The
schedule itself is an add-on FedAvg, FedProx and SCAFFOLD accept (`algorithm.gsnr.enabled=true`):
server_app/addons/gsnr.py."""

from __future__ import annotations

from typing import Unpack

from server_app.federated.experiment_binding import Common
from server_app.strategies.fedavg import FedAvg


class FedGsnr(FedAvg):
    """FedAvg with the GSNR step schedule: each round the clients' gradient statistics set
    every client's local steps E_k (the run's steps: `train["local_steps"]`, required).

    Parameters
    ----------
    samples : Optional[int] (default: 64)
        The per-sample gradients each client computes for the statistics.
    allocation : Optional[str] (default: "matched")
        "matched": sum E_k = N E (the paper's tables); "scaled": round(E n_opt).
    max_steps : Optional[int] (default: None)
        A cap on E_k (matched allocation gives the excess to the others).
    **common
        The arguments every strategy takes (`FederatedStrategy`).
    """

    def __init__(
        self,
        *,
        samples: int | None = None,
        allocation: str | None = None,
        max_steps: int | None = None,
        **common: Unpack[Common],
    ) -> None:
        given = {"samples": samples, "allocation": allocation, "max_steps": max_steps}
        super().__init__(settings={f"algorithm.gsnr.{k}": v for k, v in given.items()}, **common)

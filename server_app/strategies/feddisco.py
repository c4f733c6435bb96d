"""FedDisco (Ye et al., ICML 2023): FedAvg with Disco weighting switched on (the paper's
FedAvg + Disco). The weighting itself is an add-on every averaging strategy accepts
(`algorithm.disco.enabled=true`): server_app/addons/disco.py."""

from __future__ import annotations

from typing import Unpack

from server_app.federated.experiment_binding import Common
from server_app.strategies.fedavg import FedAvg


class FedDisco(FedAvg):
    """FedAvg whose model average uses FedDisco's weights (the paper's FedAvg + Disco):
    p_k proportional to ReLU(n_k - a d_k + b), d_k the discrepancy between client k's label
    distribution and the target.

    Parameters
    ----------
    metric : Optional[str] (default: "kl")
        The discrepancy: "kl", "l1", "l2" or "cosine".
    a : Optional[float] (default: 0.5)
        The weight of the discrepancy d_k.
    b : Optional[float] (default: 0.1)
        The offset: a larger b flattens the weights.
    target : Optional[str] (default: "uniform")
        "uniform", or "global" (the clients' summed label counts, which they then reveal).
    **common
        The arguments every strategy takes (`FederatedStrategy`); with the nodes' own
        ClientApp (`client_app.make_client_app`), `num_classes` is required.
    """

    def __init__(
        self,
        *,
        metric: str | None = None,
        a: float | None = None,
        b: float | None = None,
        target: str | None = None,
        **common: Unpack[Common],
    ) -> None:
        given = {"metric": metric, "a": a, "b": b, "target": target}
        super().__init__(settings={f"algorithm.disco.{k}": v for k, v in given.items()}, **common)

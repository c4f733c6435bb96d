"""MOON (Li, He, Song, CVPR 2021): FedAvg's server; the contrastive term lives on the client.

See `client_app/algorithms/moon.py` for the local objective CE + mu * l_con.
"""

from __future__ import annotations

from typing import Unpack

from server_app.federated.experiment_binding import Common
from server_app.strategies.fedavg import FedAvg


class Moon(FedAvg):
    """Server half of MOON: FedAvg's averaging (any add-on weighting applies).

    Parameters
    ----------
    mu : Optional[float] (default: 0.1)
        The contrastive term's weight in the clients' objective CE + mu l_con.
    temperature : Optional[float] (default: 0.5)
        The contrastive loss's temperature.
    feature_layer : Optional[str] (default: None)
        The model's child whose output is the penultimate features; None: the model's own
        `features`/`classifier` children.
    **common
        The arguments every strategy takes (`FederatedStrategy`).
    """

    # forward passes of the global and the previous model beside the local model's forward
    # and backward: 5 forward-pass costs against plain SGD's 3 (a backward costs about 2)
    step_cost = 5 / 3

    def __init__(
        self,
        *,
        mu: float | None = None,
        temperature: float | None = None,
        feature_layer: str | None = None,
        **common: Unpack[Common],
    ) -> None:
        settings = {
            "algorithm.mu": mu,
            "algorithm.temperature": temperature,
            "model.feature_layer": feature_layer,
        }
        super().__init__(settings=settings, **common)

"""FedAdagrad (Reddi et al., ICLR 2021): the server steps with Adagrad on the clients' average
change, by Flower's `FedAdagrad` (see `server_app/strategies/fedopt.py`).

v_t = v_{t-1} + Delta_t^2: no decay, so there is no beta_2. The paper's Algorithm 2 keeps the
momentum m_t = beta_1 m_{t-1} + (1 - beta_1) Delta_t; Flower's `FedAdagrad` fixes beta_1 = 0
(the default here too) and its `FedOpt` reads the attribute, which `beta_1` sets.
"""

from __future__ import annotations

from typing import Unpack

from flwr.serverapp.strategy import FedAdagrad as FlowerFedAdagrad

from server_app.federated.experiment_binding import Common
from server_app.strategies.fedopt import FedOpt, checked


class FedAdagrad(FedOpt):
    """FedAvg's clients, Adagrad on the server (eta 0.01, beta_1 0, tau 1e-3 by default).

    Parameters
    ----------
    eta, eta_l, beta_1, tau : Optional[float]
        As `FedOpt`'s; beta_1 0 is Flower's FedAdagrad (no momentum). No beta_2: v sums.
    **common
        The arguments every strategy takes (`FederatedStrategy`).
    """

    flower_class = FlowerFedAdagrad

    def __init__(
        self,
        *,
        eta: float | None = None,
        eta_l: float | None = None,
        beta_1: float | None = None,
        tau: float | None = None,
        **common: Unpack[Common],
    ) -> None:
        super().__init__(eta=eta, eta_l=eta_l, beta_1=beta_1, tau=tau, **common)
        # Flower's FedAdagrad takes no beta_1 and its FedOpt reads the attribute
        self.optimizer.beta_1 = checked(beta_1=self.experiment.algorithm.beta_1)["beta_1"]

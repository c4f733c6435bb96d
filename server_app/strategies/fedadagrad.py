"""FedAdagrad (Reddi et al., ICLR 2021): the server steps with Adagrad on the clients' average
change, by Flower's `FedAdagrad` (see `server_app/strategies/fedopt.py`).

v_t = v_{t-1} + Delta_t^2: no decay, so there is no beta_2. The paper's Algorithm 2 keeps the
momentum m_t = beta_1 m_{t-1} + (1 - beta_1) Delta_t; Flower's `FedAdagrad` fixes beta_1 = 0
(the default here too) and its `FedOpt` reads the attribute, which `beta_1` sets.
"""

from __future__ import annotations

from typing import Any

from flwr.serverapp.strategy import FedAdagrad as FlowerFedAdagrad

from server_app.strategies.fedopt import FedOpt, checked


class FedAdagrad(FedOpt):
    """FedAvg's clients, Adagrad on the server. Flower's defaults: eta 0.1, tau 1e-3."""

    flower_class = FlowerFedAdagrad

    def __init__(self, *, beta_1: float = 0.0, **settings: Any) -> None:
        """`settings`: FedOpt's, without beta_2."""
        super().__init__(**settings)
        self.optimizer.beta_1 = checked(beta_1=beta_1)["beta_1"]

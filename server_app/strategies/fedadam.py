"""FedAdam (Reddi et al., ICLR 2021): the server steps with Adam on the clients' average
change, by Flower's `FedAdam` (see `server_app/strategies/fedopt.py`).

v_t = beta_2 v_{t-1} + (1 - beta_2) Delta_t^2, and Flower bias-corrects the server rate:
eta_t = eta sqrt(1 - beta_2^(t+1)) / (1 - beta_1^(t+1)), t the round.
"""

from __future__ import annotations

from flwr.serverapp.strategy import FedAdam as FlowerFedAdam

from server_app.strategies.fedopt import FedOpt


class FedAdam(FedOpt):
    """FedAvg's clients, Adam on the server. Flower's defaults: eta 0.1, beta_1 0.9,
    beta_2 0.99, tau 1e-3."""

    flower_class = FlowerFedAdam

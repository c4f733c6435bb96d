"""FedYogi (Reddi et al., ICLR 2021): the server steps with Yogi on the clients' average
change, by Flower's `FedYogi` (see `server_app/strategies/fedopt.py`).

v_t = v_{t-1} - (1 - beta_2) Delta_t^2 sign(v_{t-1} - Delta_t^2): v_t moves towards Delta_t^2
by an additive step, so it grows no faster than Adagrad's and shrinks slower than Adam's.
"""

from __future__ import annotations

from flwr.serverapp.strategy import FedYogi as FlowerFedYogi

from server_app.strategies.fedopt import FedOpt


class FedYogi(FedOpt):
    """FedAvg's clients, Yogi on the server. Flower's defaults: eta 0.01, beta_1 0.9,
    beta_2 0.99, tau 1e-3."""

    flower_class = FlowerFedYogi

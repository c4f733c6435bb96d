"""MOON (Li, He, Song, CVPR 2021): FedAvg's server; the contrastive term lives on the client.

See `client_app/algorithms/moon.py` for the local objective CE + mu * l_con.
"""

from __future__ import annotations

from server_app.strategies.fedavg import FedAvg


class Moon(FedAvg):
    """Server half of MOON: FedAvg's averaging (any add-on weighting applies)."""

    # forward passes of the global and the previous model beside the local model's forward
    # and backward: 5 forward-pass costs against plain SGD's 3 (a backward costs about 2)
    step_cost = 5 / 3

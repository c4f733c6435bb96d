"""MOON's server is FedAvg's averaging."""

from __future__ import annotations

import numpy as np

from server_app.strategies.fedavg import FedAvg
from server_app.strategies.moon import Moon
from tests.mock_replies import aggregate, reply


def test_moon_server_averages_like_fedavg() -> None:
    replies = [
        reply(1, [np.array([1.0, 2.0], np.float32)], partition_id=0, num_examples=1),
        reply(2, [np.array([4.0, 8.0], np.float32)], partition_id=1, num_examples=3),
    ]
    moon = aggregate(Moon(), replies).arrays
    fedavg = aggregate(FedAvg(), replies).arrays
    np.testing.assert_array_equal(moon.to_numpy_ndarrays()[0], [3.25, 6.5])
    np.testing.assert_array_equal(moon.to_numpy_ndarrays()[0], fedavg.to_numpy_ndarrays()[0])

"""Central evaluation on the loaded (read-only) splits."""

from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn

from fl_system.learning.evaluation import evaluate


def test_read_only_splits_are_scored_without_a_warning_and_left_as_they_were() -> None:
    x = np.arange(24, dtype=np.float32).reshape(6, 4) / 24
    y = np.array([0, 1, 2, 0, 1, 2])
    for a in (x, y):
        a.flags.writeable = False  # as the data cache hands them out
    model = nn.Linear(4, 3)
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor([0.0, 1.0, 0.0]))  # always predicts class 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        accuracy, loss = evaluate(model, x, y, device=torch.device("cpu"), batch_size=4)
    assert accuracy == 2 / 6
    z = np.exp(1) + 2  # softmax of the logits (0, 1, 0): class 1 e / z, the others 1 / z
    expected = (2 * -np.log(np.exp(1) / z) + 4 * -np.log(1 / z)) / 6
    assert abs(loss - expected) < 1e-6
    np.testing.assert_array_equal(x, np.arange(24, dtype=np.float32).reshape(6, 4) / 24)

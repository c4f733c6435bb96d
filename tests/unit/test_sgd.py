"""Sgd: torch.optim.SGD's numbers, step for step, without importing torch._dynamo."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn

from fl_system.learning.sgd import Sgd


def _model(scale: float) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3))
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return model


def _train(model: nn.Module, optimizer: object, steps: int, scale: float) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        x = torch.randn(8, 5, generator=generator) * scale
        y = torch.randint(0, 3, (8,), generator=generator)
        optimizer.zero_grad()  # type: ignore[attr-defined]
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()  # type: ignore[attr-defined]
    return [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("momentum", [0.0, 0.9])
@pytest.mark.parametrize("weight_decay", [0.0, 1e-3])
@pytest.mark.parametrize(("lr", "scale"), [(0.05, 1.0), (1e-6, 1e-20), (0.5, 1e3)])
def test_every_step_equals_torch_sgd(
    momentum: float, weight_decay: float, lr: float, scale: float
) -> None:
    ours, theirs = _model(scale), _model(scale)
    got = _train(ours, Sgd(ours.parameters(), lr, momentum, weight_decay), 7, scale)
    expected = _train(
        theirs,
        torch.optim.SGD(theirs.parameters(), lr=lr, momentum=momentum, weight_decay=weight_decay),
        7,
        scale,
    )
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)


def test_a_parameter_without_a_gradient_is_left_alone() -> None:
    frozen, used = torch.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    sgd = Sgd([frozen, used], lr=0.5, momentum=0.9)
    (used * torch.tensor([1.0, 2.0])).sum().backward()
    sgd.step()
    assert torch.equal(frozen, torch.ones(2))
    assert torch.equal(used, torch.tensor([0.5, 0.0]))
    sgd.zero_grad()
    assert used.grad is None


def test_a_local_round_imports_no_torch_dynamo() -> None:
    """torch.optim's first step imports it: about a second of CPU per training process."""
    code = (
        "import sys, numpy as np, torch\n"
        "from client_app.trainer import TrainSettings, train_locally\n"
        "from client_app.algorithms.fedavg import FedAvgRule\n"
        "model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 2))\n"
        "x = np.ones((6, 4), np.float32); y = np.array([0, 1, 0, 1, 0, 1])\n"
        "train_locally(model, x, y, FedAvgRule(), TrainSettings(batch_size=2), seed=0,\n"
        "              device=torch.device('cpu'))\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"

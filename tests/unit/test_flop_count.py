"""The virtual clock's FLOP count: torch's FlopCounterMode's total, exactly, for every model of
the zoo, without importing torch._dynamo (about a second of CPU, twice a run)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf
from torch.utils.flop_counter import FlopCounterMode

from fl_system.cli import CONF_DIR
from fl_system.heterogeneity.profiles import training_flops_per_sample
from fl_system.learning.own_model import instantiate_model

ZOO = {
    "mlp": [1, 8, 8],
    "cnn": [1, 28, 28],
    "resnet18_gn": [3, 32, 32],
    "vgg11": [3, 32, 32],
}


def _model(name: str, shape: list[int]) -> torch.nn.Module:
    node = OmegaConf.load(CONF_DIR / "model" / f"{name}.yaml")
    node = OmegaConf.merge({"dataset": {"input_shape": shape, "num_classes": 10}}, {"m": node})
    torch.manual_seed(0)
    return instantiate_model(node.m, shape, 10)


def _flop_counter_mode(model: torch.nn.Module, shape: list[int]) -> float:
    counter = FlopCounterMode(display=False)
    with counter:
        model(torch.zeros((2, *shape))).float().sum().backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / 2


@pytest.mark.parametrize("name", sorted(ZOO))
def test_the_count_is_flop_counter_modes(name: str) -> None:
    shape = ZOO[name]
    model = _model(name, shape)
    ours = training_flops_per_sample(model, shape)
    assert ours > 0 and ours == _flop_counter_mode(model, shape)


def test_counting_imports_no_torch_dynamo() -> None:
    # per sample: conv 1->4 (3x3, 6x6 out) 2 x 1296 forward and 2592 for its weights'
    # gradient; linear 144->10 2 x 1440 forward, 2880 each for its weights' and its input's
    # gradients: 5472 + 2592 + 5760 = 13824
    code = (
        "import sys, torch\n"
        "from fl_system.heterogeneity.profiles import training_flops_per_sample\n"
        "model = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.BatchNorm2d(4),"
        " torch.nn.Flatten(), torch.nn.Linear(144, 10))\n"
        "print(training_flops_per_sample(model, [1, 8, 8]), 'torch._dynamo' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["13824.0", "False"], out.stdout + out.stderr

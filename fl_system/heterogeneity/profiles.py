"""Each client's device and network, drawn once from seeded distributions.

Speeds are lognormal around a median (ln x ~ N(ln median, sigma); sigma = 0 gives everyone the
median): device throughput in GFLOP/s, uplink and downlink in Mbit/s. A client's draws come
from (seed, partition) alone, so its profile is the same whatever the number of clients, in
every algorithm of a comparison and after a resume. Seconds per sample = the model's training
FLOPs per sample (forward and backward, counted once with torch's FLOP formulas) / the
device's FLOP/s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from fl_system.heterogeneity.clock import Profile, megabits
from fl_system.learning.seeding import derive_seed

_PROFILE_SALT = 0x0DE5  # separates profile draws from the other seeds of a client


@dataclass(frozen=True)
class Spread:
    """A lognormal distribution by its median and the sigma of its log."""

    median: float
    sigma: float

    def draw(self, rng: np.random.Generator) -> float:
        return float(self.median * np.exp(self.sigma * rng.standard_normal()))


@dataclass(frozen=True)
class ProfileMix:
    """The distributions clients are drawn from."""

    gflops: Spread
    uplink_mbps: Spread
    downlink_mbps: Spread
    latency_ms: float

    def draw(self, seed: int, partition: int, flops_per_sample: float) -> Profile:
        rng = np.random.default_rng(derive_seed(seed, partition, _PROFILE_SALT))
        spreads = (self.gflops, self.uplink_mbps, self.downlink_mbps)
        gflops, up, down = (d.draw(rng) for d in spreads)
        return Profile(
            seconds_per_sample=flops_per_sample / (gflops * 1e9),
            up_bytes_per_second=megabits(up),
            down_bytes_per_second=megabits(down),
            latency=self.latency_ms / 1e3,
        )


def training_flops_per_sample(model: object, input_shape: Sequence[int]) -> float:
    """FLOPs of one training step on one sample: forward, loss and backward."""
    import torch

    assert isinstance(model, torch.nn.Module)
    x = torch.zeros((2, *input_shape))  # two samples: BatchNorm-style layers need a batch
    counter = _flop_counter()
    with counter:
        out = model(x)
        out.float().sum().backward()
    model.zero_grad(set_to_none=True)
    return counter.total / 2


def _flop_counter() -> Any:  # a class made here: torch is imported only when counting
    """A dispatch mode that adds up torch's own per-operator FLOP formulas (the registry
    `FlopCounterMode` reads, with its arguments), so its total is `FlopCounterMode`'s.

    Unlike `FlopCounterMode`, it turns off the guard every dispatch mode gets against
    torch.compile (the documented `_should_skip_dynamo` flag): nothing is compiled here, and
    the guard's first call imports torch._dynamo, about a second of CPU in fl-run's checks and
    again in the ServerApp of every run on a virtual clock."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    class FlopCount(TorchDispatchMode):
        @classmethod
        def _should_skip_dynamo(cls) -> bool:
            return False

        def __init__(self) -> None:
            super().__init__()
            self.total = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = flop_registry.get(func._overloadpacket)
            if formula is not None:
                self.total += formula(*args, **kwargs, out_val=out)
            return out

    return FlopCount()

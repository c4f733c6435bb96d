"""Where differential-privacy noise comes from: the operating system's entropy, never the seed.

Flower 1.42's DP wrappers and mods draw their noise from NumPy's global generator
(`np.random.normal` in `add_gaussian_noise_inplace`, and in adaptive clipping's noisy count).
Whoever seeds that generator (an experiment's `seed`), or forks a process after it was used,
makes the noise regenerable: subtract it and the un-noised model is back. `install()` points
Flower's wrappers and mods at `gaussian_noise_inplace` and `noisy_fraction` here, which draw
from a generator seeded afresh from the operating system's entropy on every call
(`numpy.random.default_rng()`: 128 bits from `secrets`). No generator outlives a draw, so a
forked process inherits none, a checkpoint holds none, and a resumed run draws fresh noise.

`reproducible(*seed_parts)` is for debugging only (`privacy.reproducible_noise=true`): inside
it, draws come from a generator seeded from the given numbers, so the run repeats bit for bit
and its epsilon protects nothing.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from contextvars import ContextVar

import numpy as np

from fl_system.flower import raise_if
from fl_system.learning.seeding import derive_seed

# The modules that bound Flower's noise function by name, and the module that defines it
# (its own helpers, add_gaussian_noise_to_params and the legacy wrappers, look it up there).
NOISE_USERS = (
    "flwr.supercore.differential_privacy",
    "flwr.serverapp.strategy.dp_fixed_clipping",
    "flwr.serverapp.strategy.dp_adaptive_clipping",
    "flwr.clientapp.mod.localdp_mod",
)
NOISE_FUNCTION = "add_gaussian_noise_inplace"
ADAPTIVE_BASE = ("flwr.serverapp.strategy.dp_adaptive_clipping", "DifferentialPrivacyAdaptiveBase")
NOISY_COUNT = "_noisy_fraction"
_NOISE_TAG = 0x6E6F6973  # keeps the debugging noise's stream apart from every other seeded one

_seeded: ContextVar[np.random.Generator | None] = ContextVar("dp_noise_seeded", default=None)


def generator() -> np.random.Generator:
    """The generator the next draw uses: fresh OS entropy, unless inside `reproducible`."""
    seeded = _seeded.get()
    return seeded if seeded is not None else np.random.default_rng()


def gaussian_noise_inplace(arrays: list[np.ndarray], std_dev: float) -> None:
    """Flower's `add_gaussian_noise_inplace`: N(0, std_dev^2) added to every element, in
    each array's dtype, from `generator()`."""
    rng = generator()
    for array in arrays:
        array += rng.normal(0.0, std_dev, array.shape).astype(array.dtype)


def noisy_fraction(wrapper: object, count: int, total: int) -> float:
    """Adaptive clipping's noisy share of clipped clients (Flower's `_noisy_fraction`)."""
    stddev = float(wrapper.clipped_count_stddev)  # type: ignore[attr-defined]
    return float(generator().normal(count, stddev)) / float(total)


@contextlib.contextmanager
def reproducible(*seed_parts: int) -> Iterator[None]:
    """Draws inside come from a generator seeded from `seed_parts`: debugging only."""
    token = _seeded.set(np.random.default_rng(derive_seed(_NOISE_TAG, *seed_parts)))
    try:
        yield
    finally:
        _seeded.reset(token)


def problems() -> list[str]:
    """What moved in the installed flwr that `install()` replaces."""
    found = []
    for name in NOISE_USERS:
        if not callable(getattr(importlib.import_module(name), NOISE_FUNCTION, None)):
            found.append(f"{name} no longer has {NOISE_FUNCTION}")
    module, cls = ADAPTIVE_BASE
    if not callable(
        getattr(getattr(importlib.import_module(module), cls, None), NOISY_COUNT, None)
    ):
        found.append(f"{cls} no longer draws its noisy count in {NOISY_COUNT}")
    return found


def install() -> None:
    """Make every noise draw of Flower's DP wrappers and mods in this process come from
    `generator()` (idempotent). Raises FlwrInternalsChanged if flwr moved what it replaces."""
    raise_if(problems())
    for name in NOISE_USERS:
        setattr(importlib.import_module(name), NOISE_FUNCTION, gaussian_noise_inplace)
    module, cls = ADAPTIVE_BASE
    setattr(getattr(importlib.import_module(module), cls), NOISY_COUNT, noisy_fraction)

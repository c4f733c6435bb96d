"""How processes are started: local (real processes on loopback), simulation, remote."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from fl_system.records.run_dir import RunPaths


class LaunchError(RuntimeError):
    """A runtime could not start, reach or finish the federation."""


@runtime_checkable
class StartsEarly(Protocol):
    """A runtime whose processes may start while fl-run still checks the config: `start`
    begins in the background, `run` goes on from there, `stop` ends them if the run is not
    going ahead (a failed check, Ctrl-C)."""

    def start(self, cfg: DictConfig, paths: RunPaths) -> None: ...

    def stop(self) -> None: ...


_warm: list[Callable[[], None]] = []


def keep_warm(release: Callable[[], None]) -> None:
    """A runtime kept processes warm for the next run of this fl-run (a `-m` sweep's next
    member): `release` ends them when fl-run exits."""
    if release not in _warm:
        _warm.append(release)


def release_warm() -> None:
    """End whatever runtimes kept warm (fl-run is exiting, however it exits)."""
    while _warm:
        _warm.pop()()

"""How processes are started: local (real processes on loopback), simulation, remote."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from fl_system.run_dir import RunPaths


class LaunchError(RuntimeError):
    """A runtime could not start, reach or finish the federation."""


@runtime_checkable
class StartsEarly(Protocol):
    """A runtime whose processes may start while fl-run still checks the config: `start`
    begins in the background, `run` goes on from there, `stop` ends them if the run is not
    going ahead (a failed check, Ctrl-C)."""

    def start(self, cfg: DictConfig, paths: RunPaths) -> None: ...

    def stop(self) -> None: ...

"""When fl-run starts the local runtime's processes early: only to overlap an import. With the
parts' checks imported already (a sweep's later member, an fl-run forked warm), a bad part is
found before any process starts; a bad dataset is still checked while the runtime starts."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import fl_system.config.preflight  # noqa: F401  the checks imported, as in a sweep's later member
from fl_system import cli
from fl_system.runtime.launch.local import LocalRuntime


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[str]]:
    """The runtime's `start` and `stop` calls (nothing is started). fl-run's signal handlers
    and Hydra's logging set-up (it disables every logger there is) are undone afterwards."""
    seen: list[str] = []
    monkeypatch.setattr(LocalRuntime, "start", lambda self, cfg, paths: seen.append("start"))
    monkeypatch.setattr(LocalRuntime, "stop", lambda self: seen.append("stop"))
    monkeypatch.chdir(tmp_path)
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    root = logging.getLogger()
    level, root_handlers = root.level, list(root.handlers)
    loggers = [lg for lg in root.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    disabled = {lg: lg.disabled for lg in loggers}
    yield seen
    for sig, handler in handlers.items():
        signal.signal(sig, handler)
    root.setLevel(level)
    root.handlers[:] = root_handlers
    for lg, was in disabled.items():
        lg.disabled = was


def _fl_run(monkeypatch: pytest.MonkeyPatch, *args: str) -> int:
    monkeypatch.setattr(sys, "argv", ["fl-run", *args, "hydra.run.dir=run"])
    with pytest.raises(SystemExit) as stopped:
        cli.main()
    return stopped.value.code


def test_a_bad_part_starts_no_process(
    calls: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _fl_run(monkeypatch, "algorithm=taco", "train.local_steps=5", "algorithm.kappa=1.5")
    assert code == 2 and calls == []
    assert "algorithm.kappa must be a number in (0, 1], got 1.5" in capsys.readouterr().err


def test_a_bad_dataset_size_is_found_while_the_runtime_starts(
    calls: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    code = _fl_run(monkeypatch, "dataset=digits", "model=mlp", "num_clients=5000")
    assert code == 2 and calls == ["start", "stop"]
    assert not (tmp_path / "run").exists()

"""fl-run follows a run through the ServerApp's log, wherever the ServerApp runs."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from fl_system.records import run_log
from fl_system.records.checkpoint import Checkpoint, save_checkpoint
from fl_system.records.results import MetricsLog
from fl_system.records.run_dir import RunPaths
from fl_system.runtime.launch import LaunchError
from fl_system.runtime.launch.processes import ProcessGroup, tool_env
from fl_system.runtime.launch.progress import follow_run, log_end, server_log

CFG = OmegaConf.create({"num_rounds": 2, "algorithm": {"name": "x"}, "dataset": {"name": "y"}})


def _follow(
    tmp_path: Path,
    lines: list[str],
    *,
    before: str = "",
    after: str = "",
    earlier: Sequence[str] = (),
    end_at_done: bool = True,
) -> tuple[RunPaths, int | None]:
    """A stand-in ServerApp that prints `lines` (as `flwr run --stream` would relay), with
    Python code `before` and `after` them, into a log that already holds an earlier run's
    `earlier` lines; the run directory, and the stand-in's exit code when the wait ended
    (None: still running)."""
    paths = RunPaths(tmp_path / "run")
    paths.logs.mkdir(parents=True, exist_ok=True)
    server_log(paths).write_text("".join(run_log.PREFIX + line + "\n" for line in earlier))
    since = log_end(paths)
    script = before + "".join(
        f"print({json.dumps(run_log.PREFIX + line)}, flush=True)\n" for line in lines
    )
    procs = ProcessGroup()
    try:
        main = procs.start(
            "serverapp", [sys.executable, "-c", script + after], server_log(paths), tool_env()
        )
        follow_run(CFG, paths, main, procs, since=since, end_at_done=end_at_done, poll=0.05)
        code = main.poll()
    finally:
        procs.stop(grace=0.0)
    return paths, code


def test_a_summary_known_only_from_the_log_lands_in_the_local_run_directory(
    tmp_path: Path,
) -> None:
    summary = {"final_accuracy": 0.75, "best_accuracy": 0.8, "rounds": 2}
    paths, _ = _follow(
        tmp_path,
        [
            run_log.round_line(1, 2, 0.8, 1.0, 1.0, 1.0),
            run_log.round_line(2, 2, 0.75, 0.9, 1.0, 2.0),
            run_log.summary_line(summary),
        ],
    )
    assert json.loads(paths.summary.read_text()) == summary


def test_the_reported_failure_is_the_error(tmp_path: Path) -> None:
    reason = "round 1: 0 usable replies of 2 sent (nodes 1, 2: client error: boom)"
    with pytest.raises(LaunchError) as err:
        _follow(tmp_path, [run_log.failed_line(reason)])
    assert str(err.value) == reason


def test_no_summary_and_no_failure_shows_the_log_tail(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="ended without a summary") as err:
        _follow(tmp_path, ["something else"])
    assert "something else" in str(err.value)


def test_a_dead_superlink_is_named_with_the_saved_rounds_and_the_resume_command(
    tmp_path: Path,
) -> None:
    """The SuperLink SIGKILLed after round 4 of a run checkpointed every 3 rounds: fl-run
    names it, not the symptom, and says how to continue from the checkpoint (round 3; the
    resumed run repeats round 4, whose row metrics.csv holds)."""
    paths = RunPaths(tmp_path / "run")
    for rnd in (1, 2, 3, 4):
        MetricsLog(paths.metrics).append({"round": rnd, "accuracy": 0.5})
    save_checkpoint(paths.checkpoint, Checkpoint(3, {"w": np.zeros(2)}, {}, 1.0, {}))
    procs = ProcessGroup()
    try:
        link = procs.start(
            "superlink",
            [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
            paths.logs / "superlink.log",
            tool_env(),
        )
        link.wait(timeout=30)
        main = procs.start(
            "flwr run",
            [sys.executable, "-c", "import time; time.sleep(30)"],
            paths.logs / "serverapp.log",
            tool_env(),
        )
        with pytest.raises(LaunchError) as err:
            follow_run(CFG, paths, main, procs, since=0, poll=0.05)
    finally:
        procs.stop()
    assert str(err.value) == (
        f"superlink exited with code -9; see {paths.logs}; rounds up to 3 are saved. "
        f"Continue it with fl-run <the same overrides> resume=true hydra.run.dir={paths.root}"
    )


def test_the_serverapps_last_line_ends_the_wait_without_its_process_ending(
    tmp_path: Path,
) -> None:
    """After "done:" the run directory is complete: Flower's shutdown after it is not waited
    for (the stand-in keeps running for a minute after printing it)."""
    summary = {"final_accuracy": 0.75, "best_accuracy": 0.8, "rounds": 1}
    lines = [
        run_log.round_line(1, 1, 0.75, 1.0, 1.0, 1.0),
        run_log.summary_line(summary),
        run_log.done_line(summary, tmp_path / "run"),
    ]
    started = time.monotonic()
    paths, code = _follow(tmp_path, lines, after="import time; time.sleep(60)")
    waited = time.monotonic() - started
    assert code is None  # still running: the wait ended on the line
    assert waited < 30
    assert json.loads(paths.summary.read_text()) == summary


def test_lines_of_an_earlier_run_in_the_same_log_are_not_this_runs(tmp_path: Path) -> None:
    """A resumed run appends to the log of the runs before it: their "failed:" and "done:"
    lines must neither end this run's wait nor become its result."""
    earlier = {"final_accuracy": 0.5, "best_accuracy": 0.5, "rounds": 1}
    summary = {"final_accuracy": 0.75, "best_accuracy": 0.8, "rounds": 2}
    paths, code = _follow(
        tmp_path,
        [run_log.round_line(2, 2, 0.75, 0.9, 1.0, 2.0), run_log.summary_line(summary)],
        before="import time; time.sleep(1)\n",
        earlier=[
            run_log.failed_line("round 2: no replies"),
            run_log.summary_line(earlier),
            run_log.done_line(earlier, tmp_path / "run"),
        ],
    )
    assert code is not None  # waited for this run, not ended by the old "done:"
    assert json.loads(paths.summary.read_text()) == summary


def test_without_end_at_done_the_wait_is_for_the_process(tmp_path: Path) -> None:
    """The simulation engine shuts Ray down after the last line: it is waited for."""
    summary = {"final_accuracy": 0.75, "best_accuracy": 0.8, "rounds": 1}
    lines = [run_log.summary_line(summary), run_log.done_line(summary, tmp_path / "run")]
    _, code = _follow(tmp_path, lines, after="import time; time.sleep(1)", end_at_done=False)
    assert code == 0

"""The ServerApp's log lines, written by the driver and read back by fl-run."""

from __future__ import annotations

import math

from fl_system.records import run_log
from fl_system.records.run_log import RunLog


def test_round_lines_give_progress_and_the_latest_accuracy() -> None:
    log = RunLog()
    log.feed(
        "INFO :      starting\n[fl_system] " + run_log.round_line(1, 5, 0.51234, 1.5, 2.0, 2.0)
    )
    assert log.round == 0  # the line has no end yet
    log.feed("\n[fl_system] " + run_log.round_line(2, 5, None, 1.2, 2.5, 4.5) + "\n")
    assert (log.round, log.accuracy) == (2, 0.5123)  # round 2 was not evaluated
    assert (log.round_seconds, log.training_seconds) == (2.5, 4.5)
    assert log.summary is None and log.failure is None


def test_a_round_line_says_what_each_time_is() -> None:
    line = run_log.round_line(3, 10, 0.9, 0.25, 12.34, 40.06)
    assert line == (
        "round 3/10 | acc 0.9000 | train loss 0.2500 | 12.3 s this round | 40.1 s training | "
        "ETA 86 s"
    )


def test_a_dp_runs_round_line_has_no_train_loss_and_still_gives_progress() -> None:
    line = run_log.round_line(3, 10, 0.9, None, 12.34, 40.06)
    assert line == "round 3/10 | acc 0.9000 | 12.3 s this round | 40.1 s training | ETA 86 s"
    log = RunLog()
    log.feed("[fl_system] " + line + "\n")
    assert (log.round, log.accuracy, log.round_seconds, log.training_seconds) == (
        3,
        0.9,
        12.3,
        40.1,
    )


def test_an_asynchronous_runs_lines_count_server_steps_and_still_give_progress() -> None:
    line = run_log.round_line(1, 25, 0.5, 1.25, 0.84, 3.21, unit="step")
    assert line == (
        "step 1/25 | acc 0.5000 | train loss 1.2500 | 0.8 s this step | 3.2 s training | ETA 20 s"
    )
    log = RunLog()
    log.feed("[fl_system] " + line + "\n")
    assert (log.round, log.accuracy, log.round_seconds, log.training_seconds) == (1, 0.5, 0.8, 3.2)
    summary = {
        "final_accuracy": 0.5,
        "best_accuracy": 0.5,
        "rounds": 1,
        "round_unit": "server step",
    }
    done = run_log.done_line(summary, "/runs/b")
    assert done == "done: final accuracy 0.5, best 0.5, 1 server step, run directory /runs/b"


def test_summary_and_failure_lines_round_trip_through_a_prefixed_stream() -> None:
    summary = {"final_accuracy": 0.8083, "rounds": 2, "best_round": 2, "target": math.nan}
    log = RunLog()
    log.feed(f"INFO :      [fl_system] {run_log.summary_line(summary)}\r\n")
    assert log.summary["final_accuracy"] == 0.8083 and math.isnan(log.summary["target"])
    log.feed("[fl_system] " + run_log.failed_line("round 3: 0 usable replies of 2 sent") + "\n")
    assert log.failure == "round 3: 0 usable replies of 2 sent"


def test_the_done_line_says_the_run_directory_is_complete() -> None:
    log = RunLog()
    summary = {"final_accuracy": 0.8, "best_accuracy": 0.9, "rounds": 3}
    log.feed("[fl_system] " + run_log.summary_line(summary) + "\n")
    assert not log.done
    line = run_log.done_line(summary, "/runs/a")
    assert line == "done: final accuracy 0.8, best 0.9, 3 rounds, run directory /runs/a"
    log.feed(f"INFO :      [fl_system] {line}\n")
    assert log.done


def test_other_lines_change_nothing() -> None:
    log = RunLog()
    log.feed("round 3/5 | acc 0.9 | not ours\n[fl_system] resuming after round 2\n")
    assert log == RunLog()

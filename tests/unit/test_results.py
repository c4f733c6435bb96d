"""metrics.csv survives resume and widening; summaries and plots come out right."""

from __future__ import annotations

import csv
import json
import math
import os
import stat
from pathlib import Path

import numpy as np
import pytest

from fl_system.records.results import (
    METRIC_COLUMNS,
    MetricsLog,
    plot_curve,
    summarize,
    write_summary,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _row(round_: int, acc: float | None, **extra: float | int | str | None) -> dict:
    return {
        "round": round_,
        "wall_seconds": round_ * 1.5,
        "train_loss": 2.0 / round_,
        "test_accuracy": acc,
        "test_loss": None,
        "participants": 10,
        "failures": 0,
        "bytes_up": 1000,
        "bytes_down": 2000,
        **extra,
    }


def _header(path: Path) -> list[str]:
    with path.open(newline="") as handle:
        return next(csv.reader(handle))


def test_append_rows_round_trip_exact(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "run" / "metrics.csv")  # run folder made on first row
    assert log.rows() == []
    log.append(_row(1, None, mu=0.01, alpha=3))
    log.append(_row(2, 0.1 + 0.2, mu=0.01, alpha=3))
    assert _header(log.path) == [*METRIC_COLUMNS, "alpha", "mu"]
    rows = log.rows()
    assert rows[0] == {
        "round": "1",
        "wall_seconds": "1.5",
        "train_loss": "2.0",
        "test_accuracy": "",
        "test_loss": "",
        "participants": "10",
        "failures": "0",
        "bytes_up": "1000",
        "bytes_down": "2000",
        "alpha": "3",
        "mu": "0.01",
    }
    assert float(rows[1]["test_accuracy"]) == 0.1 + 0.2  # repr keeps every bit
    assert rows[1]["train_loss"] == "1.0"


def test_missing_fixed_keys_are_blank_and_round_is_required(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.csv")
    log.append({"round": 1, "test_accuracy": 0.5})
    assert log.rows() == [{c: "" for c in METRIC_COLUMNS} | {"round": "1", "test_accuracy": "0.5"}]
    with pytest.raises(ValueError, match="round"):
        log.append({"test_accuracy": 0.6})


def test_new_extra_column_widens_header_and_keeps_rows(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.csv")
    log.append(_row(1, 0.2, zeta=1.5))
    log.append(_row(2, 0.3, beta=7, zeta=2.5))
    log.append(_row(3, 0.4))  # fewer keys than the header: blanks, no rewrite
    assert _header(log.path) == [*METRIC_COLUMNS, "beta", "zeta"]
    rows = log.rows()
    assert [(r["round"], r["beta"], r["zeta"]) for r in rows] == [
        ("1", "", "1.5"),
        ("2", "7", "2.5"),
        ("3", "", ""),
    ]
    assert rows[0]["test_accuracy"] == "0.2"
    assert list(tmp_path.iterdir()) == [log.path]  # no temp files left behind


def test_resume_appends_under_existing_header(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    MetricsLog(path).append(_row(1, 0.2, gamma=0.5))
    resumed = MetricsLog(path)
    assert resumed.columns == [*METRIC_COLUMNS, "gamma"]
    resumed.append(_row(2, 0.3, gamma=0.25))
    text = path.read_text()
    assert text.count("round,") == 1  # header written once
    assert [r["gamma"] for r in resumed.rows()] == ["0.5", "0.25"]


def test_partial_last_line_from_a_crash_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    MetricsLog(path).append(_row(1, 0.2))
    with path.open("a") as handle:
        handle.write("2,3.0,1.0,0.3")  # torn write: no newline
    log = MetricsLog(path)
    assert [r["round"] for r in log.rows()] == ["1"]
    log.append(_row(2, 0.3))
    assert [(r["round"], r["test_accuracy"]) for r in log.rows()] == [("1", "0.2"), ("2", "0.3")]


def test_rows_reach_the_disk_with_the_durable_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """checkpoint.every=3: rounds 1 and 2 are written (a killed process loses neither) and
    synced to the disk with round 3's, once, before its checkpoint."""
    synced: list[str] = []
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}")))
    path = tmp_path / "metrics.csv"
    log = MetricsLog(path)
    for rnd in (1, 2):
        log.append(_row(rnd, 0.1 * rnd), durable=False)
    assert synced == [] and [r["round"] for r in MetricsLog(path).rows()] == ["1", "2"]
    log.append(_row(3, 0.3), durable=True)
    assert synced == [str(path)]


def test_truncate_after(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.csv")
    for r in range(1, 6):
        log.append(_row(r, r / 10, extra=r))
    log.truncate_after(3)
    assert [r["round"] for r in log.rows()] == ["1", "2", "3"]
    assert _header(log.path) == [*METRIC_COLUMNS, "extra"]
    log.append(_row(4, 0.9, extra=40))
    assert [(r["round"], r["extra"]) for r in log.rows()] == [
        ("1", "1"),
        ("2", "2"),
        ("3", "3"),
        ("4", "40"),
    ]
    log.truncate_after(0)
    assert log.rows() == []
    assert _header(log.path) == [*METRIC_COLUMNS, "extra"]


def test_truncate_on_empty_log_is_noop(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.csv")
    log.truncate_after(3)
    assert not log.path.exists()


def _hand_rows() -> list[dict[str, str]]:
    # round, wall_seconds, test_accuracy, bytes_up, bytes_down
    table = [
        ("1", "1.5", "", "100", "200"),
        ("2", "3.0", "0.40", "100", "200"),
        ("3", "4.5", "", "100", "200"),
        ("4", "6.25", "0.55", "100", "200"),
        ("5", "7.5", "0.50", "", "200"),
    ]
    keys = ("round", "wall_seconds", "test_accuracy", "bytes_up", "bytes_down")
    return [dict(zip(keys, values, strict=True)) for values in table]


def test_summarize_target_reached() -> None:
    summary = summarize(_hand_rows(), target_accuracy=0.5)
    assert summary == {
        "final_accuracy": 0.50,
        "best_accuracy": 0.55,
        "best_round": 4,
        "rounds": 5,
        "rounds_to_target": 4,
        "seconds_to_target": 6.25,
        "bytes_up": 400,
        "bytes_down": 1000,
        "wall_seconds": 7.5,
        "mean_last10_accuracy": pytest.approx((0.40 + 0.55 + 0.50) / 3),
        "mean_last10_evaluations": 3,
    }


def test_summarize_target_boundary_and_not_reached() -> None:
    assert summarize(_hand_rows(), target_accuracy=0.40)["rounds_to_target"] == 2  # >= counts
    missed = summarize(_hand_rows(), target_accuracy=0.56)
    assert missed["rounds_to_target"] is None
    assert missed["seconds_to_target"] is None
    no_target = summarize(_hand_rows(), target_accuracy=None)
    assert (no_target["rounds_to_target"], no_target["seconds_to_target"]) == (None, None)


def test_summarize_last10_uses_last_ten_evaluations_and_earliest_best() -> None:
    rows = [{"round": str(r), "test_accuracy": str(r / 100)} for r in range(1, 13)]
    rows.append({"round": "13", "test_accuracy": "0.12"})  # ties the best, later
    summary = summarize(rows, target_accuracy=None)
    assert summary["mean_last10_accuracy"] == pytest.approx(0.084)  # rounds 4..13
    assert summary["mean_last10_evaluations"] == 10
    assert (summary["best_accuracy"], summary["best_round"]) == (0.12, 12)
    assert summary["wall_seconds"] is None
    assert (summary["bytes_up"], summary["bytes_down"]) == (0, 0)


def test_summarize_empty_and_unevaluated() -> None:
    empty = summarize([], target_accuracy=0.5)
    assert empty["rounds"] == 0
    assert empty["final_accuracy"] is None
    assert empty["mean_last10_accuracy"] is None
    assert (empty["bytes_up"], empty["wall_seconds"]) == (0, None)
    blank = summarize(
        [{"round": "1", "test_accuracy": "", "wall_seconds": "2"}], target_accuracy=0.1
    )
    assert (blank["rounds"], blank["best_round"], blank["wall_seconds"]) == (1, None, 2.0)


def test_summarize_reads_metrics_log(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.csv")
    for r, acc in enumerate([None, 0.3, None, 0.6], start=1):
        log.append(_row(r, acc))
    summary = summarize(log.rows(), target_accuracy=0.5)
    assert (summary["rounds_to_target"], summary["seconds_to_target"]) == (4, 6.0)
    assert (summary["bytes_up"], summary["bytes_down"]) == (4000, 8000)


def test_write_summary_is_strict_json(tmp_path: Path) -> None:
    path = tmp_path / "run" / "summary.json"
    summary = {"best_accuracy": 0.5, "loss": math.nan, "rounds": np.int64(3), "x": [np.float32(1)]}
    write_summary(path, summary)
    text = path.read_text()
    assert json.loads(text) == {"best_accuracy": 0.5, "loss": None, "rounds": 3, "x": [1.0]}
    assert text.startswith('{\n  "best_accuracy": 0.5,')
    assert sorted(p.name for p in path.parent.iterdir()) == ["summary.json"]


def test_plot_curve_writes_png(tmp_path: Path) -> None:
    rows = [{"round": str(r), "test_accuracy": str(r / 10), "train_loss": "0"} for r in range(5)]
    rows[2]["test_accuracy"] = ""
    path = tmp_path / "curve.png"
    plot_curve(rows, path, title="fedavg / cifar10")
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert len(data) > 1000
    plot_curve([], tmp_path / "empty.png", title="no rounds")
    assert (tmp_path / "empty.png").read_bytes().startswith(PNG_SIGNATURE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["curve.png", "empty.png"]


def test_summarize_splits_compressed_uploads_into_updates_and_the_rest() -> None:
    rows = _hand_rows()
    for i, row in enumerate(rows):
        row.update(update_bytes_up=str(50 + i), update_bits_naive="390", update_bits_golomb="200")
    summary = summarize(rows, target_accuracy=None)
    assert summary["update_bytes_up"] == 260  # 50 + 51 + 52 + 53 + 54
    assert summary["other_bytes_up"] == 400 - 260
    assert (summary["update_bits_naive"], summary["update_bits_golomb"]) == (1950, 1000)
    assert "update_bytes_up" not in summarize(_hand_rows(), target_accuracy=None)


def test_partition_columns_follow_the_number_not_the_text(tmp_path: Path) -> None:
    log = MetricsLog(tmp_path / "metrics.csv")
    log.append(_row(1, 0.5, **{f"weight_{p}": 0.1 for p in (10, 2, 1, 0, 11)}, alpha_mean=0.3))
    extras = log.columns[len(METRIC_COLUMNS) :]
    assert extras == ["alpha_mean", "weight_0", "weight_1", "weight_2", "weight_10", "weight_11"]


def test_results_take_the_users_umask(tmp_path: Path) -> None:
    previous = os.umask(0o027)
    try:
        log = MetricsLog(tmp_path / "metrics.csv")
        log.append(_row(1, 0.5))
        log.append(_row(2, 0.6, extra=1))  # widening rewrites the file atomically
        write_summary(tmp_path / "summary.json", summarize(log.rows(), target_accuracy=None))
        plot_curve(log.rows(), tmp_path / "curve.png", title="t")
    finally:
        os.umask(previous)
    for name in ("metrics.csv", "summary.json", "curve.png"):
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o640, name

"""Run results on disk: per-round ``metrics.csv``, ``summary.json`` and ``curve.png``.

The CSV is the source of truth: each row reaches the operating system as it is written (a
killed process loses none) and the disk (fsync) before the checkpoint that counts it, and the
file is cut back to a checkpoint's round on resume; the summary and the plot are derived from
it and written atomically, so a crash never leaves a half-written file behind.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "METRIC_COLUMNS",
    "MetricsLog",
    "plot_curve",
    "summarize",
    "write_summary",
]

METRIC_COLUMNS: tuple[str, ...] = (
    "round",
    "wall_seconds",
    "train_loss",
    "test_accuracy",
    "test_loss",
    "participants",
    "failures",
    "bytes_up",
    "bytes_down",
)

Cell = float | int | str | None


def _atomic_write(path: Path, data: bytes) -> None:
    """Write via a temp file in the same folder and ``os.replace`` it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 is for secrets; results are not
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process's umask (reading it means setting it: set it straight back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _column_order(name: str) -> tuple[str, int]:
    """Columns by name, a trailing number read as a number: weight_2 before weight_10."""
    found = re.fullmatch(r"(.*?)(\d+)", name)
    return (found.group(1), int(found.group(2))) if found else (name, -1)


def _cell(value: Cell) -> str:
    return "" if value is None else str(value)


class MetricsLog:
    """Append-only metrics.csv that survives resume; extra algorithm columns allowed.

    `leading` are the columns every row has, first (a DP run leaves out what it withholds).
    """

    def __init__(self, path: Path, leading: Sequence[str] = METRIC_COLUMNS) -> None:
        self.path = Path(path)
        self.leading = tuple(leading)
        self._columns: list[str] = []
        if self.path.exists():
            self._drop_partial_last_line()
            with self.path.open(newline="") as handle:
                self._columns = next(csv.reader(handle), [])

    @property
    def columns(self) -> list[str]:
        """Header of the file as it stands (empty before the first row)."""
        return list(self._columns)

    def append(self, row: Mapping[str, Cell], *, durable: bool = True) -> None:
        """Add one round's row; a new extra key widens the header and rewrites the file.
        `durable`: on the disk (fsync) before this returns, with the rows before it."""
        if row.get("round") is None:
            raise ValueError("a metrics row needs a 'round' value")
        wanted = self._columns_for(row.keys())
        if self._columns and wanted != self._columns:
            self._rewrite(self.rows(), wanted)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", newline="") as handle:
            writer = csv.writer(handle)
            if not self._columns:
                writer.writerow(wanted)
                self._columns = wanted
            writer.writerow([_cell(row.get(col)) for col in self._columns])
            handle.flush()
            if durable:
                os.fsync(handle.fileno())

    def rows(self) -> list[dict[str, str]]:
        """All rows as strings; cells missing from older narrower rows read as ''."""
        return read_rows(self.path)

    def truncate_after(self, round_: int) -> None:
        """Drop rows after ``round_`` so a resumed run does not log those rounds twice."""
        if not self._columns:
            return
        kept = [r for r in self.rows() if int(float(r["round"])) <= round_]
        self._rewrite(kept, self._columns)

    def _columns_for(self, keys: Iterable[str]) -> list[str]:
        extras = {k for k in keys if k not in self.leading}
        extras.update(c for c in self._columns if c not in self.leading)
        return [*self.leading, *sorted(extras, key=_column_order)]

    def _rewrite(self, rows: Sequence[Mapping[str, str]], columns: list[str]) -> None:
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer)
        writer.writerow(columns)
        for row in rows:
            writer.writerow([row.get(col, "") for col in columns])
        _atomic_write(self.path, buffer.getvalue().encode())
        self._columns = list(columns)

    def _drop_partial_last_line(self) -> None:
        """A crash mid-write can leave a row without its newline; that row is not trusted."""
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            _atomic_write(self.path, data[: data.rfind(b"\n") + 1])


def write_table(path: Path, rows: Sequence[Mapping[str, Cell]]) -> None:
    """A small CSV table (the first row's columns), written atomically."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]) if rows else [], lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: _cell(v) for k, v in row.items()} for row in rows)
    _atomic_write(path, out.getvalue().encode())


def read_rows(path: Path) -> list[dict[str, str]]:
    """A metrics.csv's rows as strings ('' for cells missing from older narrower rows), read
    only: unlike MetricsLog, nothing trims a last line a running run is writing."""
    if not path.exists():
        return []
    with path.open(newline="") as handle:
        return [
            {key: value or "" for key, value in record.items() if key is not None}
            for record in csv.DictReader(handle, restval="")
        ]


def number(value: Any) -> float | None:
    """Parse a CSV cell (or a raw number); blanks, None and junk become None."""
    if value is None or value == "":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _count(value: Any) -> int:
    parsed = number(value)
    return 0 if parsed is None else int(parsed)


def summarize(
    rows: Sequence[Mapping[str, Any]],
    *,
    target_accuracy: float | None,
    accuracy: str = "test_accuracy",
    score: str | None = None,
    lower_is_better: bool = False,
) -> dict:
    """Headline numbers of a run; rounds without an evaluation are skipped for accuracy.

    `accuracy` is the column accuracy is read from (fed_accuracy under federated
    evaluation); `score` the selected metric's column (`evaluation.select`), which the best
    round and the target follow (the lowest, and at or below the target, when
    `lower_is_better`): `score`, `best_score` and `final_score` name it and its values when it
    is not the accuracy column."""
    score = score or accuracy
    evaluated = [
        (_count(r.get("round")), acc, number(r.get("wall_seconds")))
        for r in rows
        if (acc := number(r.get(accuracy))) is not None
    ]
    judged = [
        (_count(r.get("round")), value, number(r.get("wall_seconds")))
        for r in rows
        if (value := number(r.get(score))) is not None
    ]
    summary: dict[str, Any] = {
        "final_accuracy": evaluated[-1][1] if evaluated else None,
        "best_accuracy": None,
        "best_round": None,
        "rounds": _count(rows[-1].get("round")) if rows else 0,
        "rounds_to_target": None,
        "seconds_to_target": None,
        "bytes_up": sum(_count(r.get("bytes_up")) for r in rows),
        "bytes_down": sum(_count(r.get("bytes_down")) for r in rows),
        "wall_seconds": number(rows[-1].get("wall_seconds")) if rows else None,
        "mean_last10_accuracy": None,  # over the last 10 evaluations, or all if fewer:
        "mean_last10_evaluations": 0,  # how many went into it
    }
    if evaluated:
        best = max(evaluated, key=lambda item: item[1])  # max keeps the earliest tie
        summary["best_accuracy"], summary["best_round"] = best[1], best[0]
        last10 = [acc for _, acc, _ in evaluated[-10:]]
        summary["mean_last10_accuracy"] = sum(last10) / len(last10)
        summary["mean_last10_evaluations"] = len(last10)
    if score != accuracy and judged:  # the selected metric decides the best round
        sign = -1 if lower_is_better else 1
        top = max(judged, key=lambda item: sign * item[1])
        summary["best_round"] = top[0]
        summary.update(score=score, best_score=top[1], final_score=judged[-1][1])
    if rows and "staleness_max" in rows[0]:  # FedBuff, FedAsync: a row is a server step
        summary["round_unit"] = "server step"
    if rows and "update_bytes_up" in rows[0]:  # compression.up: the updates, and the rest
        summary["update_bytes_up"] = sum(_count(r.get("update_bytes_up")) for r in rows)
        summary["other_bytes_up"] = summary["bytes_up"] - summary["update_bytes_up"]
        for bits in ("update_bits_naive", "update_bits_golomb"):
            summary[bits] = sum(_count(r.get(bits)) for r in rows)
    if rows and "broadcast_bytes" in rows[0]:  # compression.down: the broadcasts' share
        for column in ("broadcast_bytes", "broadcast_bits_naive", "broadcast_bits_golomb"):
            summary[column] = sum(_count(r.get(column)) for r in rows)
    for kind in ("global", "local"):  # client_eval: BMTA (best mean) and the last mean
        scored = [
            (_count(r.get("round")), acc)
            for r in rows
            if (acc := number(r.get(f"client_acc_{kind}"))) is not None
        ]
        if scored:
            best = max(scored, key=lambda item: item[1])
            summary[f"bmta_{kind}"], summary[f"bmta_{kind}_round"] = best[1], best[0]
            summary[f"final_client_acc_{kind}"] = scored[-1][1]
    if target_accuracy is not None:
        hit = next(
            (
                item
                for item in judged
                if (item[1] <= target_accuracy if lower_is_better else item[1] >= target_accuracy)
            ),
            None,
        )
        if hit is not None:
            summary["rounds_to_target"], summary["seconds_to_target"] = hit[0], hit[2]
    if rows and "virtual_clock" in rows[0]:
        summary.update(virtual_summary(rows, target_accuracy))
    return summary


ACCURACY_LADDER = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.97, 0.98, 0.99)


def virtual_summary(rows: Sequence[Mapping[str, Any]], target: float | None) -> dict[str, Any]:
    """system=...: the final virtual clock, and the virtual time at which the run first
    reached each accuracy of the ladder (and the target) that it reached."""
    reached: dict[str, float] = {}
    marks = sorted({*ACCURACY_LADDER, *([target] if target is not None else [])})
    for row in rows:
        acc, clock = number(row.get("test_accuracy")), number(row.get("virtual_clock"))
        if acc is None or clock is None:
            continue
        for mark in marks:
            if acc >= mark:
                reached.setdefault(f"{mark:g}", clock)
    out: dict[str, Any] = {
        "virtual_clock": number(rows[-1].get("virtual_clock")),
        "virtual_seconds_to_accuracy": reached,
    }
    if target is not None:
        out["virtual_seconds_to_target"] = reached.get(f"{target:g}")
    return out


def _json_safe(value: Any) -> Any:
    """NaN/inf are not JSON; numpy scalars are not JSON-serialisable: fix both."""
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str | bytes):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def write_summary(path: Path, summary: Mapping) -> None:
    """Write summary.json atomically (indent 2, strict JSON)."""
    text = json.dumps(_json_safe(summary), indent=2, allow_nan=False, default=str)
    _atomic_write(Path(path), (text + "\n").encode())


def _series(rows: Sequence[Mapping[str, Any]], column: str) -> list[tuple[int, float]]:
    """(round, value) pairs of one column, skipping blank cells."""
    return [
        (_count(r.get("round")), value)
        for r in rows
        if (value := number(r.get(column))) is not None
    ]


def partition_columns(rows: Sequence[Mapping[str, Any]], prefix: str) -> dict[int, list[float]]:
    """Values of the `<prefix><partition id>` columns over the rows, blanks skipped."""
    out: dict[int, list[float]] = {}
    for row in rows:
        for key, cell in row.items():
            pid = key[len(prefix) :]
            if key.startswith(prefix) and pid.isdigit() and (value := number(cell)) is not None:
                out.setdefault(int(pid), []).append(value)
    return out


def plot_curve(rows: Sequence[Mapping[str, Any]], path: Path, *, title: str) -> None:
    """Test accuracy against round, train loss on a twin axis; written atomically."""
    import matplotlib

    matplotlib.use("Agg")  # headless servers and SuperNode containers have no display
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    acc = _series(rows, "test_accuracy")
    loss = _series(rows, "train_loss")
    timed = rows and "virtual_clock" in rows[0]
    fig, axes = plt.subplots(1, 2 if timed else 1, figsize=(11.0 if timed else 6.4, 4.0))
    ax_acc = axes[0] if timed else axes
    try:
        if timed:  # system=...: accuracy against the virtual clock beside it
            _plot_virtual(axes[1], rows)
        ax_acc.plot([x for x, _ in acc], [y for _, y in acc], color="tab:blue", marker=".")
        ax_acc.set_xlabel("round")
        ax_acc.xaxis.set_major_locator(MaxNLocator(integer=True))  # no round 2.5
        ax_acc.set_ylabel("test accuracy", color="tab:blue")
        ax_loss = ax_acc.twinx()
        ax_loss.plot([x for x, _ in loss], [y for _, y in loss], color="tab:orange", alpha=0.7)
        ax_loss.set_ylabel("train loss", color="tab:orange")
        ax_acc.set_title(title)
        ax_acc.grid(alpha=0.3)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=100)
    finally:
        plt.close(fig)
    _atomic_write(Path(path), buffer.getvalue())


def _plot_virtual(ax: Any, rows: Sequence[Mapping[str, Any]]) -> None:
    """Test accuracy against virtual time, in hours when the run is long."""
    points = [
        (clock, acc)
        for r in rows
        if (acc := number(r.get("test_accuracy"))) is not None
        and (clock := number(r.get("virtual_clock"))) is not None
    ]
    hours = bool(points) and points[-1][0] > 3 * 3600
    scale = 3600.0 if hours else 1.0
    ax.plot([c / scale for c, _ in points], [a for _, a in points], color="tab:green", marker=".")
    ax.set_xlabel(f"virtual {'hours' if hours else 'seconds'} (system=...)")
    ax.set_ylabel("test accuracy", color="tab:green")
    ax.grid(alpha=0.3)

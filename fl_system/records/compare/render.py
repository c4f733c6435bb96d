"""The comparison table as text (the terminal), Markdown or CSV (`--out`)."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

ACCURACY = (("final_accuracy", "final acc %"), ("best_accuracy", "best acc %"))


def cells(keys: Sequence[str], rows: Sequence[dict], target: float | None) -> list[list[str]]:
    """Header and one line per configuration, as the text and Markdown tables show them."""
    header = [*keys, "seeds", "runs"] + [label for _, label in ACCURACY]
    if target is not None:
        header.append(f"rounds to {100 * target:g} %")
    header += ["MB up", "MB down", "training s"]
    clocked = any(row["virtual_seconds_mean"] is not None for row in rows)  # system=...
    if clocked:
        header.append("virtual s")
        if target is not None:
            header.append(f"virtual s to {100 * target:g} %")
    lines = [header]
    for row in rows:
        line = [setting(row[k]) for k in keys]
        line.append(",".join(str(s) for s in row["seeds"]))
        line.append(
            str(row["runs"])
            if row["finished"] == row["runs"]
            else f"{row['runs']} ({row['runs'] - row['finished']} unfinished)"
        )
        for name, _ in ACCURACY:
            line.append(_pm(row[f"{name}_mean"], row[f"{name}_std"], scale=100, digits=2))
        if target is not None:
            spread = _pm(row["rounds_to_target_mean"], row["rounds_to_target_std"], digits=1)
            line.append(f"{spread} ({row['reached']}/{row['runs']})")
        line.append(_number(row["bytes_up_mean"], 1e-6, 2))
        line.append(_number(row["bytes_down_mean"], 1e-6, 2))
        line.append(_number(row["seconds_mean"], 1, 1))
        if clocked:
            line.append(_seconds(row["virtual_seconds_mean"], row["virtual_seconds_std"]))
            if target is not None:
                line.append(_seconds(row["virtual_to_target_mean"], row["virtual_to_target_std"]))
        lines.append(line)
    return lines


def as_text(lines: Sequence[Sequence[str]]) -> str:
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)).rstrip()
        for line in lines
    )


def as_markdown(lines: Sequence[Sequence[str]]) -> str:
    rendered = ["| " + " | ".join(line) + " |" for line in lines]
    rendered.insert(1, "|" + "---|" * len(lines[0]))
    return "\n".join(rendered) + "\n"


def as_csv(keys: Sequence[str], rows: Sequence[dict]) -> str:
    """Raw numbers (fractions, bytes, seconds), mean and std in columns of their own."""
    columns = list(rows[0]) if rows else list(keys)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(_csv_cell(row[c]) for c in columns)
    return out.getvalue()


def setting(value: Any) -> str:
    """A setting's value as the table and the plot's legend show it."""
    return "null" if value is None else str(value)


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, list):
        return " ".join(str(v) for v in value)
    return str(value)


def _pm(mean: float | None, std: float | None, scale: float = 1, digits: int = 2) -> str:
    if mean is None or std is None:
        return "-"
    return f"{scale * mean:.{digits}f} ± {scale * std:.{digits}f}"


def _seconds(mean: float | None, std: float | None) -> str:
    """Virtual seconds to the precision they need: two significant digits of the spread (of
    the mean when the seeds agree), at least one decimal (a run of tiny messages over fast
    links lasts milliseconds)."""
    if mean is None or std is None:
        return "-"
    scale = std if std > 0 else abs(mean)
    digits = 1 if scale == 0 else min(max(1, 1 - math.floor(math.log10(scale))), 9)
    return _pm(mean, std, digits=digits)


def _number(value: float | None, scale: float, digits: int) -> str:
    return "-" if value is None else f"{scale * value:.{digits}f}"

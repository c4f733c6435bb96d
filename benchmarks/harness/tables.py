"""Formatting a report: percentages, per-seed lists, the machine line, sections and notes."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from pathlib import Path

from benchmarks.harness.fl_run import cpu_model


def pct1(value: float | None) -> str:
    return "diverged" if value is None else f"{100 * value:.2f}"


def signed_list(values: Sequence[float | None]) -> str:
    return ", ".join("diverged" if v is None else f"{100 * v:+.2f}" for v in values)


def machine_line(load_start: Sequence[float]) -> str:
    import torch

    return (
        f"- Machine: nproc {os.cpu_count()}, CPU {cpu_model()}; Python "
        f"{platform.python_version()}, torch {torch.__version__}; load average (1/5/15 min) at "
        "start "
        + " / ".join(f"{v:.2f}" for v in load_start)
        + ", at the end "
        + " / ".join(f"{v:.2f}" for v in os.getloadavg())
    )


def report_text(sections: Sequence[Sequence[str]], notes: Path | None = None) -> str:
    """The report: non-empty sections (lists of lines) separated by a blank line, and the
    Markdown file `notes` (if given) appended as the last section."""
    parts = [list(s) for s in sections if s]
    if notes:
        parts.append(notes.read_text().splitlines())
    return "\n\n".join("\n".join(s) for s in parts) + "\n"

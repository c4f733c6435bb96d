"""Where a study's files live: benchmarks/<study>/report.md, its plot and saved runs beside it."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness.fl_run import ROOT

REPORT = "report.md"


def report_path(study: str) -> Path:
    """The study's committed report, the default of its --out."""
    return ROOT / "benchmarks" / study / REPORT


def beside(report: Path, name: str, suffix: str) -> Path:
    """A file that goes with `report`: `name` next to a study's report.md (plot.png,
    runs.json), else the report's own name with `suffix` (/tmp/quick.md -> /tmp/quick.png)."""
    return report.with_name(name) if report.name == REPORT else report.with_suffix(suffix)


def plot_path(report: Path) -> Path:
    return beside(report, "plot.png", ".png")


def runs_path(report: Path) -> Path:
    return beside(report, "runs.json", ".runs.json")


def invocation(study: str) -> str:
    """How a study is run, for its usage and error lines."""
    return f"python -m benchmarks.{study}.run"


def write_report(out: Path, lines: list[str]) -> None:
    """The study's report, its folder made if needed; says where it went."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print(f"[bench] report written to {out}", flush=True)

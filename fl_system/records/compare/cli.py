"""`fl-compare RUN_OR_SWEEP_DIR...`: one table of every configuration, seeds pooled.

    fl-compare multirun/2026-11-26/10-00-00 --target 0.9 --out table.md --plot curves.png

Each directory is a run (config.yaml and metrics.csv) or is searched for runs. Runs that
differ only in their seed are one configuration: accuracy mean ± std over its seeds, rounds
to `--target`, bytes and training seconds; the settings that differ between configurations
are the first columns; `--plot` overlays each configuration's mean curve with its seed band
(`--x rounds|bytes|seconds`). A directory that is neither is one error line (the others are still
compared), and fl-compare then exits 2; an unfinished run is counted and marked.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from fl_system.records.compare.plot import X_AXES, write_plot
from fl_system.records.compare.render import as_csv, as_markdown, as_text, cells
from fl_system.records.compare.runs import find_runs
from fl_system.records.compare.table import configurations, table

OUT_FORMATS = (".csv", ".md")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fl-compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="run directories or sweep directories")
    parser.add_argument(
        "--target", type=float, help="an accuracy (fraction, e.g. 0.9): rounds to reach it"
    )
    parser.add_argument("--out", type=Path, help="also write the table: .csv or .md")
    parser.add_argument("--plot", type=Path, help="also draw the curves: a .png")
    parser.add_argument("--x", choices=list(X_AXES), default="rounds", help="the plot's x axis")
    args = parser.parse_args(argv)
    if args.target is not None and not 0 < args.target <= 1:
        parser.error(f"--target must be an accuracy in (0, 1], got {args.target}")
    if args.out is not None and args.out.suffix not in OUT_FORMATS:
        parser.error(f"--out must end in {' or '.join(OUT_FORMATS)}, got {args.out}")
    if args.plot is not None and args.plot.suffix != ".png":
        parser.error(f"--plot must end in .png, got {args.plot}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    runs, errors = find_runs(args.dirs)
    for error in errors:
        print(f"fl-compare: error: {error}", file=sys.stderr)
    if not runs:
        return 2
    keys, rows = table(runs, args.target)
    lines = cells(keys, rows, args.target)
    print(as_text(lines))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        text = as_csv(keys, rows) if args.out.suffix == ".csv" else as_markdown(lines)
        args.out.write_text(text)
        print(f"fl-compare: table written to {args.out}")
    if args.plot is not None:
        write_plot(configurations(runs), keys, args.plot, args.x)
        print(f"fl-compare: curves drawn in {args.plot}")
    return 2 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

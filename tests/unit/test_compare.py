"""fl-compare on run directories written in fl-run's formats: config.yaml with Hydra's
interpolations, metrics.csv by MetricsLog, summary.json by summarize/write_summary."""

from __future__ import annotations

import csv
import io
import statistics
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from fl_system.records.compare.cli import main
from fl_system.records.compare.runs import find_runs
from fl_system.records.compare.table import table
from fl_system.records.results import MetricsLog, summarize, write_summary

# (algorithm, mu) x seed -> the accuracy of rounds 1..3 (the last is the final one)
CURVES = {
    ("fedavg", None): {0: [0.2, 0.5, 0.5], 1: [0.3, 0.6, 0.6], 2: [0.4, 0.7, 0.7]},
    ("fedprox", 0.01): {0: [0.1, 0.4, 0.8], 1: [0.2, 0.5, 0.9], 2: [0.3, 0.6, 0.4]},
    ("fedprox", 0.1): {0: [0.5, 0.5, 0.5], 1: [0.6, 0.6, 0.6], 2: [0.1, 0.1, 0.1]},
}


def _write_run(path: Path, name: str, mu: float | None, seed: int, curve: list[float]) -> None:
    config = {
        "algorithm": {
            "name": name,
            "mu": mu,
            "local_rule": {"_target_": f"x.{name}", "mu": "${..mu}"},
        },
        "dataset": {"name": "digits"},
        "seed": seed,
        "run_id": f"{seed:016x}",
        "run_dir": str(path),
        "resume": False,
        "num_rounds": len(curve),
    }
    path.mkdir(parents=True)
    OmegaConf.save(OmegaConf.create(config), path / "config.yaml")
    log = MetricsLog(path / "metrics.csv")
    rows = []
    for rnd, acc in enumerate(curve, start=1):
        row = {"round": rnd, "wall_seconds": 0.5 * rnd, "test_accuracy": acc}
        row |= {"bytes_up": 1000 * (seed + 1), "bytes_down": 2000}
        log.append(row)
        rows.append(row)
    write_summary(path / "summary.json", summarize(rows, target_accuracy=None))


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """A 3 x 3 sweep as Hydra lays it out: sweep/<member>/ for every member."""
    member = 0
    for (name, mu), seeds in CURVES.items():
        for seed, curve in seeds.items():
            _write_run(tmp_path / "sweep" / f"{member}-{name}", name, mu, seed, curve)
            member += 1
    return tmp_path / "sweep"


def test_the_table_pools_seeds_and_its_means_are_the_summaries(sweep: Path) -> None:
    runs, errors = find_runs([sweep])
    assert errors == [] and len(runs) == 9
    keys, rows = table(runs, target=0.55)
    # the setting that tells configurations apart, once: not the class path, not the
    # interpolated copy in local_rule, not the seed, id or directory
    assert keys == ["algorithm.mu", "algorithm.name"]
    assert [(r["algorithm.name"], r["algorithm.mu"], r["seeds"]) for r in rows] == [
        ("fedavg", None, [0, 1, 2]),
        ("fedprox", 0.01, [0, 1, 2]),
        ("fedprox", 0.1, [0, 1, 2]),
    ]
    for row, seeds in zip(rows, CURVES.values(), strict=True):
        finals = [c[-1] for c in seeds.values()]
        bests = [max(c) for c in seeds.values()]
        assert row["final_accuracy_mean"] == pytest.approx(statistics.fmean(finals), abs=1e-12)
        assert row["final_accuracy_std"] == pytest.approx(statistics.stdev(finals), abs=1e-12)
        assert row["best_accuracy_mean"] == pytest.approx(statistics.fmean(bests), abs=1e-12)
        assert row["bytes_up_mean"] == 3 * (1000 + 2000 + 3000) / 3
        assert row["seconds_mean"] == 1.5 and row["runs"] == row["finished"] == 3
    # rounds to 55 %: fedavg seeds 1, 2 at round 2 (seed 0 never); fedprox 0.01: rounds 3, 3, 2;
    # fedprox 0.1: seed 1 only, at round 1
    assert (rows[0]["reached"], rows[0]["rounds_to_target_mean"]) == (2, 2.0)
    assert (rows[1]["reached"], rows[1]["rounds_to_target_mean"]) == (3, pytest.approx(8 / 3))
    assert (rows[2]["reached"], rows[2]["rounds_to_target_mean"]) == (1, 1.0)


def test_what_a_run_directory_holds_is_not_another_run(sweep: Path) -> None:
    """W&B's offline files keep copies of config.yaml and metrics.csv inside the run."""
    member = sorted(sweep.iterdir())[0]
    inner = member / "wandb" / "offline-run-1" / "files"
    inner.mkdir(parents=True)
    for name in ("config.yaml", "metrics.csv"):
        (inner / name).write_bytes((member / name).read_bytes())
    runs, errors = find_runs([sweep])
    assert errors == [] and sorted(r.path for r in runs) == sorted(sweep.iterdir())


def test_the_terminal_table_and_the_markdown_and_csv_files(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(sweep), "--target", "0.55", "--out", str(tmp_path / "t.md")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].split() == [
        "algorithm.mu", "algorithm.name", "seeds", "runs", "final", "acc", "%", "best", "acc",
        "%", "rounds", "to", "55", "%", "MB", "up", "MB", "down", "training", "s",
    ]  # fmt: skip
    assert printed[1].split()[:8] == [
        "null",
        "fedavg",
        "0,1,2",
        "3",
        "60.00",
        "±",
        "10.00",
        "60.00",
    ]
    markdown = (tmp_path / "t.md").read_text().splitlines()
    assert markdown[1] == "|" + "---|" * 10
    assert markdown[2].startswith("| null | fedavg | 0,1,2 | 3 | 60.00 ± 10.00 |")
    assert main([str(sweep), "--out", str(tmp_path / "t.csv")]) == 0
    records = list(csv.DictReader(io.StringIO((tmp_path / "t.csv").read_text())))
    assert [r["algorithm.name"] for r in records] == ["fedavg", "fedprox", "fedprox"]
    assert float(records[0]["final_accuracy_mean"]) == pytest.approx(0.6)
    assert records[0]["seeds"] == "0 1 2" and records[0]["algorithm.mu"] == ""


@pytest.mark.parametrize("x_axis", ["rounds", "bytes", "seconds"])
def test_the_curves_are_drawn_into_a_png(sweep: Path, tmp_path: Path, x_axis: str) -> None:
    path = tmp_path / "plots" / f"{x_axis}.png"
    assert main([str(sweep), "--plot", str(path), "--x", x_axis]) == 0
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (825, 528)  # 7.5 x 4.8 inches at 110 dpi


def test_an_unfinished_run_is_counted_and_marked(
    sweep: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (sweep / "0-fedavg" / "summary.json").unlink()  # stopped before its summary
    runs, _ = find_runs([sweep])
    _, rows = table(runs)
    assert (rows[0]["runs"], rows[0]["finished"]) == (3, 2)
    assert rows[0]["final_accuracy_mean"] == pytest.approx(0.6)  # from its rows, as fl-run would
    assert main([str(sweep)]) == 0
    assert "3 (1 unfinished)" in capsys.readouterr().out


def test_directories_that_are_not_runs_are_one_line_each(
    sweep: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "empty").mkdir()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.yaml").write_text("a: ${missing}\n")
    (broken / "metrics.csv").write_text("round\n1\n")
    code = main(
        [str(sweep / "1-fedavg"), str(tmp_path / "absent"), str(tmp_path / "empty"), str(broken)]
    )
    assert code == 2
    captured = capsys.readouterr()
    errors = captured.err.splitlines()
    assert errors[:2] == [
        f"fl-compare: error: {tmp_path / 'absent'}: no such directory",
        f"fl-compare: error: {tmp_path / 'empty'}: not a run directory and holds none (a run "
        "directory has config.yaml and metrics.csv)",
    ]
    assert errors[2] == (
        f"fl-compare: error: {broken / 'config.yaml'}: unreadable (InterpolationKeyError: "
        "Interpolation key 'missing' not found)"
    )
    assert len(errors) == 3
    assert captured.out.splitlines()[1].split()[:5] == [
        "1",
        "1",
        "60.00",
        "±",
        "0.00",
    ]  # the good run
    assert main([str(tmp_path / "empty")]) == 2
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "90"], "--target must be an accuracy in (0, 1], got 90.0"),
        (["--out", "table.txt"], "--out must end in .csv or .md, got table.txt"),
        (["--plot", "curves.pdf"], "--plot must end in .png, got curves.pdf"),
    ],
)
def test_bad_options_are_refused(
    sweep: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        main([str(sweep), *args])
    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1].endswith(message)


@pytest.mark.parametrize(
    ("scale", "shown"),
    [(1.0, "| 60.0 ± 42.4 | 40.0 ± 28.3 |"), (1e-3, "| 0.060 ± 0.042 | 0.040 ± 0.028 |")],
)
def test_runs_on_the_virtual_clock_show_their_virtual_time(
    tmp_path: Path, scale: float, shown: str
) -> None:
    """system=...: the clock at the end and when the target was reached, mean over seeds,
    to the precision the spread needs (milliseconds of tiny messages on fast links)."""
    for seed, step in ((0, 10.0 * scale), (1, 30.0 * scale)):
        path = tmp_path / f"run{seed}"
        _write_run(path, "fedavg", None, seed, [0.3, 0.6, 0.9])
        rows = MetricsLog(path / "metrics.csv").rows()
        log_path = path / "metrics.csv"
        log_path.unlink()
        log = MetricsLog(log_path)
        for r, row in enumerate(rows, start=1):
            log.append({**row, "virtual_seconds": step, "virtual_clock": step * r})
        write_summary(path / "summary.json", summarize(log.rows(), target_accuracy=None))
    runs, _ = find_runs([tmp_path])
    _, rows = table(runs, target=0.55)
    assert rows[0]["virtual_seconds_mean"] == pytest.approx(60.0 * scale)  # 30 and 90
    assert rows[0]["virtual_to_target_mean"] == pytest.approx(40.0 * scale)  # round 2
    out = tmp_path / "table.md"
    assert main([str(tmp_path), "--target", "0.55", "--out", str(out)]) == 0
    text = out.read_text()
    assert "| virtual s | virtual s to 55 % |" in text and shown in text

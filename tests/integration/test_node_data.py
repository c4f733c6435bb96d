"""Nodes that hold their own data: the same rows as CSV, Parquet and a saved Hugging Face
dataset train and score exactly as they do given as npz; a node whose data does not fit the
task is refused by name before round 1 (exit 2), or left out."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from sklearn.datasets import load_breast_cancer

from fl_system.data.node_data import Task, read_node_data
from fl_system.records.results import MetricsLog
from tests.integration.conftest import run_cli, run_every_algorithm

pytestmark = pytest.mark.integration

COLUMNS = ("radius", "texture", "perimeter", "area")  # the task orders them by name
MEAN, STD = (
    {"area": 655, "perimeter": 92, "radius": 14, "texture": 19},
    {
        "area": 352,
        "perimeter": 24,
        "radius": 3.5,
        "texture": 4.3,
    },
)
TASK = [
    "dataset=table",
    "dataset.classes=[malignant,benign]",
    "dataset.features={" + ",".join(f"{c}:float" for c in COLUMNS) + "}",
    f"dataset.mean=[{','.join(str(MEAN[c]) for c in sorted(COLUMNS))}]",
    f"dataset.std=[{','.join(str(STD[c]) for c in sorted(COLUMNS))}]",
    "evaluation=federated",
    "model=mlp",
    "num_clients=3",
]
FED = ("fed_accuracy", "fed_loss", "fed_balanced_accuracy", "fed_macro_f1", "fed_auroc")


def _sites(root: Path) -> list[np.ndarray]:
    """Three sites of scikit-learn's breast-cancer table, as CSV, Parquet and a saved
    Hugging Face dataset, and the same rows as npz (x in the task's column order)."""
    import datasets

    data = load_breast_cancer()
    names = [str(n) for n in data.target_names]  # 0 malignant, 1 benign
    rows = {c: data.data[:, i] for i, c in enumerate(COLUMNS)}
    table = pa.table({**rows, "label": [names[t] for t in data.target]})
    parts = np.array_split(np.random.default_rng(0).permutation(len(data.target)), 3)
    root.mkdir(parents=True, exist_ok=True)
    pa_csv.write_csv(table.take(parts[0]), root / "a.csv")
    pq.write_table(table.take(parts[1]), root / "b.parquet")
    datasets.Dataset(table.take(parts[2])).save_to_disk(str(root / "c"))
    x = np.stack([rows[c] for c in sorted(COLUMNS)], axis=1)
    for i, part in enumerate(parts):
        (root / f"npz{i}").mkdir()
        np.savez(root / f"npz{i}" / "train.npz", x=x[part], y=data.target[part])
    return parts


def _fed(run_dir: Path) -> list[dict]:
    return [{k: float(r[k]) for k in FED} for r in MetricsLog(run_dir / "metrics.csv").rows()]


def test_csv_parquet_and_saved_dataset_nodes_match_the_same_rows_as_npz(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """runtime=local (a SuperLink and three SuperNodes over gRPC) on the table files vs the
    same rows as npz: every round's federated metrics within 1e-6."""
    sites = tmp_path / "sites"
    _sites(sites)
    tables = run_cli(
        [
            *TASK,
            "runtime=local",
            "num_rounds=5",
            f"runtime.node_data=[{sites / 'a.csv'},{sites / 'b.parquet'},{sites / 'c'}]",
            f"hydra.run.dir={tmp_path / 'tables'}",
        ],
        cli_env,
    )
    assert tables.returncode == 0, tables.stderr[-3000:]
    npz = run_cli(
        [
            *[a for a in TASK if not a.startswith(("dataset=", "dataset.features"))],
            "dataset=npz",
            "dataset.input_shape=[4]",
            "runtime=simulation",
            "num_rounds=5",
            f"runtime.node_data=[{','.join(str(sites / f'npz{i}') for i in range(3))}]",
            f"hydra.run.dir={tmp_path / 'npz'}",
        ],
        cli_env,
    )
    assert npz.returncode == 0, npz.stderr[-3000:]
    got, expected = _fed(tmp_path / "tables"), _fed(tmp_path / "npz")
    assert len(got) == len(expected) == 5
    for ours, theirs in zip(got, expected, strict=True):
        for key in FED:
            assert abs(ours[key] - theirs[key]) <= 1e-6, (key, ours, theirs)
    assert got[-1]["fed_accuracy"] > 0.85  # it learned: the comparison is not of noise
    log = (tmp_path / "tables" / "logs" / "serverapp.log").read_text()
    assert "node b.parquet: 190 training records (table," in log


def _run(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        [*TASK, "runtime=simulation", "num_rounds=1", f"hydra.run.dir={tmp_path / 'run'}", *args],
        env,
    )


def test_a_node_whose_data_does_not_fit_is_refused_by_name_before_round_1(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    sites = tmp_path / "sites"
    _sites(sites)
    text = pa.table({c: ["high"] * 3 for c in COLUMNS} | {"label": ["benign"] * 3})
    pa_csv.write_csv(text, sites / "text.csv")
    nodes = f"runtime.node_data=[{sites / 'a.csv'},{sites / 'text.csv'},{sites / 'c'}]"
    stopped = _run(tmp_path, cli_env, nodes)
    assert stopped.returncode == 2, stopped.stderr[-3000:]
    assert f'node 1 ({sites / "text.csv"}): column "area" is text, the task says float' in (
        stopped.stderr
    )
    assert "Traceback" not in stopped.stderr
    assert not (tmp_path / "run" / "metrics.csv").exists()

    left_out = _run(
        tmp_path,
        cli_env,
        nodes,
        "dataset.on_mismatch=exclude",
        "hydra.run.dir=" + str(tmp_path / "ex"),
    )
    assert left_out.returncode == 0, left_out.stderr[-3000:]
    rows = MetricsLog(tmp_path / "ex" / "metrics.csv").rows()
    assert [int(r["fed_clients"]) for r in rows] == [2]
    log = (tmp_path / "ex" / "logs" / "serverapp.log").read_text()
    assert "left out of the run (dataset.on_mismatch=exclude)" in log


def _image_sites(root: Path) -> None:
    """scikit-learn's digits as three image-folder sites (train/ and test/), unequal in size
    and skewed in label."""
    from PIL import Image
    from sklearn.datasets import load_digits

    digits = load_digits()
    rng = np.random.default_rng(0)
    order = rng.permutation(len(digits.target))
    skewed = [order[digits.target[order] < 5], order[digits.target[order] >= 5]]
    sites = [skewed[0][:500], skewed[1][:120], np.concatenate([skewed[0][500:], skewed[1][120:]])]
    for s, members in enumerate(sites):
        pixels = (digits.images[members] * 16).clip(0, 255).astype(np.uint8)
        for k, (i, image) in enumerate(zip(members, pixels, strict=True)):
            part = "test" if k % 5 == 0 else "train"
            folder = root / f"site{s}" / part / str(digits.target[i])
            folder.mkdir(parents=True, exist_ok=True)
            Image.fromarray(image).save(folder / f"{i}.png")


@pytest.mark.parametrize("held", ["table", "images"])
def test_every_algorithm_runs_two_rounds_on_node_held_data(
    held: str, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """Each algorithm, 2 rounds on three nodes' tables (CSV, Parquet, saved dataset) and on
    image folders, normalised (the statistics checked against numpy's on images) and
    evaluated federated: a warm simulation sweep."""
    sites = tmp_path / "sites"
    if held == "table":
        _sites(sites)
        task = [a for a in TASK if not a.startswith(("dataset.mean", "dataset.std"))]
        paths = [sites / "a.csv", sites / "b.parquet", sites / "c"]
    else:
        _image_sites(sites)
        task = [  # dataset.classes unset: fl-run reads the class folders (0..9, by value)
            "dataset=images",
            "dataset.image_size=[16,16]",  # resized from 8x8: the CNN's smallest input
            "evaluation=federated",
            "model=cnn",
            "num_clients=3",
        ]
        paths = [sites / f"site{i}" for i in range(3)]
    common = [
        *task,
        "dataset.normalize=federated",
        "runtime=simulation",
        "num_rounds=2",
        "train.local_steps=4",
        f"runtime.node_data=[{','.join(map(str, paths))}]",
    ]
    for member in run_every_algorithm(common, tmp_path, cli_env):
        rows = MetricsLog(member / "metrics.csv").rows()
        assert int(rows[-1]["fed_clients"]) == 3 and float(rows[-1]["fed_accuracy"]) > 0
        if held == "images":
            ran = OmegaConf.load(member / "config.yaml")
            assert list(ran.dataset.classes) == [str(c) for c in range(10)], member.name
            _check_normalisation(member, paths)


def _check_normalisation(run_dir: Path, sites: list[Path]) -> None:
    """dataset.normalize=federated: the server's mean and std equal numpy's over the union
    of the nodes' training images as they read them; each node's reply weighs the same
    whatever it holds (no pixel travels), a few hundred bytes."""
    task = Task(kind="images", classes=tuple(map(str, range(10))), image_size=(16, 16), channels=1)
    trained = [read_node_data(site, task).train.x for site in sites]
    derived = json.loads((run_dir / "summary.json").read_text())["normalisation"]
    union = np.concatenate(trained).astype(np.float64) / 255.0
    assert abs(derived["mean"][0] - union.mean()) <= 1e-5
    assert abs(derived["std"][0] - union.std()) <= 1e-5
    sizes = list(derived["reply_bytes"].values())
    held = [t.nbytes for t in trained]
    assert max(held) > 4 * min(held)  # the sites differ in size ...
    assert max(sizes) - min(sizes) <= 8  # ... their replies do not
    assert max(sizes) < min(held) / 3  # Flower's envelope, three float64 arrays of one


def test_a_table_predicts_a_number_under_task_regression(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """task=regression: the breast-cancer sites predict texture from the other columns;
    FedProx over three nodes lowers the federated MSE, R^2 judges the run; an algorithm
    whose rule needs class labels is refused in one line."""
    sites = tmp_path / "sites"
    _sites(sites)
    task = [
        "task=regression",
        "dataset=table",
        "dataset.label_column=texture",
        "dataset.features={radius:float,perimeter:float,area:float}",
        "dataset.normalize=federated",
        "evaluation=federated",
        "model=mlp",
        "num_clients=3",
        "runtime=simulation",
        "train.lr=0.01",
        f"runtime.node_data=[{sites / 'a.csv'},{sites / 'b.parquet'},{sites / 'c'}]",
    ]
    run = run_cli(
        [*task, "algorithm=fedprox", "num_rounds=3", f"hydra.run.dir={tmp_path / 'run'}"],
        cli_env,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    rows = MetricsLog(tmp_path / "run" / "metrics.csv").rows()
    mse = [float(r["fed_mse"]) for r in rows]
    assert mse[-1] < mse[0] and {"fed_mae", "fed_r2"} <= set(rows[0])
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["score"] == "fed_r2" and summary["final_score"] == float(rows[-1]["fed_r2"])
    assert "final fed_r2" in run.stdout

    refused = run_cli([*task, "algorithm=efl", f"hydra.run.dir={tmp_path / 'efl'}"], cli_env)
    assert refused.returncode == 2
    assert refused.stderr.strip() == (
        "fl-run: error: algorithm=efl cannot run task=regression: its Fisher diagonals are of "
        "the cross-entropy loss"
    )

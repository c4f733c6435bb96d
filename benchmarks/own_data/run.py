"""Nodes that hold their own data as image folders vs the same records as npz in memory.

Fashion-MNIST (Debian's dataset-fashion-mnist) written out as PNG files, read by the nodes
as image folders (`dataset=images`), against the same arrays, in the same order, given to
the nodes as npz (`dataset=npz`, loaded whole): the in-memory path. Both normalise with
mean 0.5 and std 0.5 and train the CNN with the same seed; runtime=local, one SuperNode
process per node, evaluation=federated on each node's test part.

1. One node holding all 60,000 training images (and the 10,000 test images): seconds per
   round, training samples per second, the peak RSS of the node's processes (its SuperNode
   and the ClientApp children forked for it), and the one-time cost of decoding the PNGs;
   and the same folder streamed (`FL_IN_MEMORY_MB=0`: batches read from the node's mapped
   cache and normalised one at a time, as a node past its memory limit trains).
2. Three sites (label skew and unequal sizes, `examples/three_sites`): every round's
   federated accuracy, seconds per round and each node's peak RSS.

    python -m benchmarks.own_data.run [--rounds-one 3] [--rounds-sites 5] [--work DIR]
                                      [--notes benchmarks/own_data/notes.md]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.harness.fl_run import cpu_model, run_fl, tool_env
from benchmarks.harness.paths import invocation, plot_path, report_path, write_report
from benchmarks.own_data.node_memory import NodeMemory, NodePeaks
from examples.three_sites.write_sites import FMNIST_CLASSES, SITES, write_image_sites
from fl_system.data.locations import DEBIAN_FASHION_MNIST
from fl_system.data.node_data import Task, read_node_data
from fl_system.records.results import read_rows

STUDY = "own_data"
MIB = 1024 * 1024
TASK = Task(kind="images", classes=FMNIST_CLASSES, image_size=(28, 28), channels=1)
COMMON = [
    "runtime=local",
    f"dataset.classes=[{','.join(FMNIST_CLASSES)}]",
    "dataset.mean=[0.5]",
    "dataset.std=[0.5]",
    "evaluation=federated",
    "model=cnn",
    "seed=0",
]
IMAGES = ["dataset=images", "dataset.image_size=[28,28]", "dataset.channels=1"]
ARMS = {  # arm -> (overrides, the nodes' environment)
    "images": (IMAGES, {}),
    "streamed": (IMAGES, {"FL_IN_MEMORY_MB": "0"}),
    "npz": (["dataset=npz", "dataset.input_shape=[1,28,28]"], {}),
}
LAYOUT_ARMS = {"one": ("images", "streamed", "npz"), "sites": ("images", "npz")}


def write_data(work: Path) -> dict[str, dict[str, list[Path]]]:
    """PNG folders for one node and three sites, and npz twins of exactly their arrays;
    the decoding time of the one node's folder, cold, goes into `decode.json`."""
    source = Path(DEBIAN_FASHION_MNIST)
    layouts = {"one": ("node",), "sites": SITES}
    paths: dict[str, dict[str, list[Path]]] = {}
    for layout, sites in layouts.items():
        root = work / layout
        if not root.is_dir():
            write_image_sites(root, source, 0, sites=sites)
        images = [root / s for s in sites]
        paths[layout] = {"images": images, "streamed": images, "npz": []}
        for site in sites:
            twin = work / f"{layout}-npz" / site
            paths[layout]["npz"].append(twin)
            if (twin / "test.npz").is_file():
                continue
            start = time.perf_counter()
            held = read_node_data(root / site, TASK)  # no cache: every PNG decoded
            if layout == "one":
                (work / "decode.json").write_text(
                    json.dumps(
                        {"seconds": time.perf_counter() - start, "images": len(held.train.y)}
                    )
                )
            twin.mkdir(parents=True, exist_ok=True)
            for part in (held.train, held.test):
                assert part is not None
                name = "train.npz" if part is held.train else "test.npz"
                np.savez(twin / name, x=part.x.astype(np.float32) / 255.0, y=part.y)
    return paths


def measure(arm: str, nodes: list[Path], rounds: int, run_dir: Path) -> dict:
    """One fl-run with a cold node cache: its rows, round seconds and memory peaks."""
    cache = Path(tempfile.mkdtemp(prefix="own-data-cache-"))
    overrides, env = ARMS[arm]
    command = [
        "fl-run",
        *COMMON,
        *overrides,
        f"num_clients={len(nodes)}",
        f"num_rounds={rounds}",
        f"runtime.node_data=[{','.join(map(str, nodes))}]",
        f"hydra.run.dir={run_dir}",
    ]
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    memory: list[NodeMemory] = []
    started = time.monotonic()
    run_fl(
        command,
        run_dir.with_suffix(".log"),
        3600,
        tool_env({"FL_CACHE_DIR": str(cache), **env}),
        on_start=lambda pid: memory.append(NodeMemory(pid)),
    )
    total = time.monotonic() - started
    peaks = memory[0].stop()
    rows = read_rows(run_dir / "metrics.csv")
    walls = [float(r["wall_seconds"]) for r in rows]
    return {
        "arm": arm,
        "total_seconds": total,
        "round_seconds": [b - a for a, b in zip([0.0, *walls], walls, strict=False)],
        "compute_seconds": [float(r["compute_seconds_max"]) for r in rows],
        "fed_accuracy": [float(r["fed_accuracy"]) for r in rows],
        "train_examples": _train_examples(nodes),
        "memory": _memory(peaks),
    }


def _train_examples(nodes: list[Path]) -> int:
    return sum(
        sum(1 for _ in (n / "train").rglob("*.png"))
        if (n / "train").is_dir()
        else len(np.load(n / "train.npz")["y"])
        for n in nodes
    )


def _memory(peaks: NodePeaks) -> dict:
    return {
        "nodes": [
            {
                "supernode": peaks.supernode[n],
                "clientapp": peaks.clientapp[n],
                "together": peaks.together[n],
                "decoders": peaks.decoders.get(n, 0),
            }
            for n in sorted(peaks.supernode)
        ],
        "launcher": peaks.launcher,
    }


def _steady(values: list[float]) -> float:
    """The median of rounds 2 on (round 1 also waits for the nodes' first reads)."""
    return statistics.median(values[1:] or values)


def report(runs: dict, decode: dict, out: Path, started: dt.datetime, args) -> None:
    one_img, one_npz = runs["one"]["images"], runs["one"]["npz"]
    one_str = runs["one"]["streamed"]
    sites_img, sites_npz = runs["sites"]["images"], runs["sites"]["npz"]
    gib = 1024 * MIB

    def rate(run: dict, key: str) -> float:
        return run["train_examples"] / _steady(run[key])

    lines = [
        f"# {STUDY}: image folders on the nodes vs the same arrays as npz",
        "",
        f"{started:%Y-%m-%d %H:%M} UTC, `{invocation(STUDY)} --rounds-one {args.rounds_one} "
        f"--rounds-sites {args.rounds_sites}`, {cpu_model()}, {os.cpu_count()} cores, "
        "runtime=local, CNN, seed 0, one run per arm (timings from one invocation).",
        "",
        "## One node, 60,000 PNG images",
        "",
        f"Decoding the node's {decode['images']:,} training PNGs (plus its 10,000 test PNGs) "
        f"once, files cold, by a DataLoader's worker processes: {decode['seconds']:.1f} s; "
        "later ClientApp processes read the decoded arrays from the node's cache.",
        "",
        "| | images | streamed | npz | images / npz | streamed / npz |",
        "|---|---|---|---|---|---|",
    ]
    rows = [
        ("seconds a round (median of rounds 2 on)", "round_seconds", "{:.2f}"),
        ("training samples / s, by round time", "rate:round_seconds", "{:,.0f}"),
        ("training samples / s, by training time", "rate:compute_seconds", "{:,.0f}"),
        ("whole run, start to exit (s)", "total_seconds", "{:.1f}"),
        ("final federated accuracy", "final", "{:.4f}"),
    ]

    def value(run: dict, what: str) -> float:
        if what.startswith("rate:"):
            return rate(run, what[5:])
        if what == "final":
            return run["fed_accuracy"][-1]
        return _steady(run[what]) if isinstance(run[what], list) else run[what]

    for label, what, fmt in rows:
        a, b, c = (value(run, what) for run in (one_img, one_str, one_npz))
        lines.append(
            f"| {label} | {fmt.format(a)} | {fmt.format(b)} | {fmt.format(c)} | {a / c:.3f} "
            f"| {b / c:.3f} |"
        )
    for arm, run in (("images", one_img), ("streamed", one_str), ("npz", one_npz)):
        node = run["memory"]["nodes"][0]
        lines.append(
            f"| peak RSS, {arm}: SuperNode / ClientApp / both at once / first read's decode "
            f"workers (GiB) | {node['supernode'] / gib:.2f} / {node['clientapp'] / gib:.2f} / "
            f"{node['together'] / gib:.2f} / {node['decoders'] / gib:.2f} | | | | |"
        )
    lines += [
        "",
        f"The shared ClientApp launcher (one per machine under runtime=local, one per node "
        f"under fl-client) peaked at {one_img['memory']['launcher'] / gib:.2f} GiB RSS "
        "(images arm); its pages are largely shared with the children it forks, whose RSS "
        "counts them again.",
        "",
        "## Three sites (label skew, unequal sizes)",
        "",
        f"Training images per run: {sites_img['train_examples']:,}. Federated accuracy by round:",
        "",
        "| round | images | npz | equal |",
        "|---|---|---|---|",
    ]
    for r, (a, b) in enumerate(
        zip(sites_img["fed_accuracy"], sites_npz["fed_accuracy"], strict=True)
    ):
        lines.append(f"| {r + 1} | {a:.4f} | {b:.4f} | {'yes' if a == b else f'{a - b:+.2e}'} |")
    img_s, npz_s = _steady(sites_img["round_seconds"]), _steady(sites_npz["round_seconds"])
    lines += [
        "",
        f"Seconds a round (median of rounds 2 on): images {img_s:.2f}, npz {npz_s:.2f}, "
        f"ratio {img_s / npz_s:.3f}.",
        "",
        "| node | images: peak RSS SuperNode + ClientApp (GiB) | npz (GiB) |",
        "|---|---|---|",
    ]
    for i, (a, b) in enumerate(
        zip(sites_img["memory"]["nodes"], sites_npz["memory"]["nodes"], strict=True)
    ):
        lines.append(f"| {SITES[i]} | {a['together'] / gib:.2f} | {b['together'] / gib:.2f} |")
    if args.notes is not None:  # the analysis written after reading an earlier report
        lines += ["", args.notes.read_text().rstrip("\n")]
    write_report(out, lines)
    _plot(sites_img, sites_npz, plot_path(out))


def _plot(images: dict, npz: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.2))
    rounds = range(1, len(images["fed_accuracy"]) + 1)
    ax.plot(rounds, images["fed_accuracy"], "o-", label="image folders")
    ax.plot(rounds, npz["fed_accuracy"], "x--", label="npz (in memory)")
    ax.set_xlabel("round")
    ax.set_ylabel("federated accuracy")
    ax.set_title("Three Fashion-MNIST sites")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds-one", type=int, default=3)
    parser.add_argument("--rounds-sites", type=int, default=5)
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "own-data")
    parser.add_argument("--out", type=Path, default=report_path(STUDY))
    parser.add_argument("--notes", type=Path, help="a notes.md to append as the last section")
    args = parser.parse_args()
    started = dt.datetime.now(dt.UTC)
    args.work.mkdir(parents=True, exist_ok=True)
    paths = write_data(args.work)
    decode = json.loads((args.work / "decode.json").read_text())
    runs: dict = {}
    for layout, rounds in (("one", args.rounds_one), ("sites", args.rounds_sites)):
        runs[layout] = {}
        for arm in LAYOUT_ARMS[layout]:
            print(f"[bench] {layout} / {arm} ...", flush=True)
            run_dir = args.work / "runs" / f"{layout}-{arm}-{started:%H%M%S}"
            runs[layout][arm] = measure(arm, paths[layout][arm], rounds, run_dir)
    (args.work / "runs.json").write_text(json.dumps(runs, indent=1))
    report(runs, decode, args.out, started, args)


if __name__ == "__main__":
    main()

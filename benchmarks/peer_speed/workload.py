"""One workload, exported once so every arm trains on the same things.

The project derives its partitions, initial model and sampled clients from its config; the
export writes those very arrays (with the functions the server and the clients call) to one
folder that the plain loop and pfl-research read: `data.npz` (test set, each client's arrays,
the clients of every round), `model.pt` (the initial model, pickled) and `workload.json`.
The readers need numpy and torch only (and `fl_system.learning.models` to unpickle a model).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SAMPLED = "sampled"  # data.npz key: (rounds, per round) partition ids


@dataclass(frozen=True)
class Workload:
    """A benchmarked experiment: what fl-run is told and what the other arms repeat."""

    name: str
    dataset: str
    model: str
    partition: str
    num_clients: int
    clients_per_round: int
    num_rounds: int
    batch_size: int = 10
    lr: float = 0.05
    local_epochs: int = 1
    seed: int = 0

    def overrides(self) -> list[str]:
        """fl-run's overrides for this workload (central evaluation every round)."""
        return [
            "algorithm=fedavg",
            f"dataset={self.dataset}",
            f"model={self.model}",
            f"partition={self.partition}",
            f"num_clients={self.num_clients}",
            f"clients_per_round={self.clients_per_round}",
            f"num_rounds={self.num_rounds}",
            f"train.batch_size={self.batch_size}",
            f"train.lr={self.lr}",
            f"train.local_epochs={self.local_epochs}",
            f"seed={self.seed}",
            "eval_every=1",
        ]


WORKLOADS = {
    "mnist5k-cnn": Workload("mnist5k-cnn", "mnist5k", "cnn", "iid", 100, 10, 20),
    # every client every round: 100 clients of 40 images in one round's lockstep
    "mnist5k-cnn-100": Workload("mnist5k-cnn-100", "mnist5k", "cnn", "iid", 100, 100, 20),
    "synthetic-1k": Workload("synthetic-1k", "synthetic", "mlp", "natural", 1000, 100, 10),
}


def export(workload: Workload, folder: Path) -> Path:
    """Write the workload's arrays, model and sampling to `folder` (returned)."""
    import torch

    from benchmarks.harness.same_start import compose_config
    from fl_system.data.configured import load_dataset, partition_indices
    from fl_system.learning.own_model import build_model
    from server_app.federation import sample_partitions

    cfg = compose_config(workload.overrides())
    data = load_dataset(cfg)
    parts = partition_indices(cfg, workload.num_clients)
    everyone = list(range(workload.num_clients))
    sampled = np.array(
        [
            sample_partitions(workload.seed, workload.clients_per_round, r, everyone)
            for r in range(1, workload.num_rounds + 1)
        ]
    )
    arrays = {"x_test": data.x_test, "y_test": data.y_test, SAMPLED: sampled}
    for pid in sorted({int(p) for p in sampled.ravel()}):  # only clients that ever train
        arrays[f"x{pid}"] = data.x_train[parts[pid]]
        arrays[f"y{pid}"] = data.y_train[parts[pid]]
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "data.npz", **arrays)
    torch.save(build_model(cfg), folder / "model.pt")
    (folder / "workload.json").write_text(json.dumps(asdict(workload)))
    return folder


@dataclass
class Loaded:
    """An exported workload read back: what the plain loop and pfl-research train on."""

    workload: Workload
    x_test: np.ndarray
    y_test: np.ndarray
    sampled: np.ndarray
    clients: dict[int, tuple[np.ndarray, np.ndarray]]
    model_path: Path


def load(folder: Path) -> Loaded:
    workload = Workload(**json.loads((folder / "workload.json").read_text()))
    with np.load(folder / "data.npz") as data:
        sampled = data[SAMPLED]
        ids = sorted({int(p) for p in sampled.ravel()})
        clients = {p: (data[f"x{p}"], data[f"y{p}"]) for p in ids}
        return Loaded(workload, data["x_test"], data["y_test"], sampled, clients,
                      folder / "model.pt")  # fmt: skip


class RoundLog:
    """One line per finished round (`round,accuracy`), flushed at once: the harness watches
    this file as it watches fl-run's metrics.csv."""

    def __init__(self, path: Path) -> None:
        self.handle = path.open("w", buffering=1)
        self.handle.write("round,test_accuracy\n")

    def round_done(self, rnd: int, accuracy: float) -> None:
        self.handle.write(f"{rnd},{accuracy}\n")
        self.handle.flush()

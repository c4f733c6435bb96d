"""Round-0 conditions: the arms of one seed start from the same partition, model and sampling."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from benchmarks.harness.fl_run import ROOT
from fl_system.data.configured import load_dataset, partition_indices
from fl_system.learning.own_model import build_model

CONF_DIR = ROOT / "conf"


def compose_config(overrides: Sequence[str]) -> DictConfig:
    """The config fl-run composes for these overrides (without the run directory)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def digest(arrays: Sequence[np.ndarray]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:12]


@dataclass(frozen=True)
class StartState:
    """What a run starts from: its partition, its initial global model, its client sampling."""

    sizes: list[int]
    label_counts: list[np.ndarray]
    partition_digest: str
    model_digest: str
    sampling_digest: str  # the participants of every round


def start_state(cfg: DictConfig) -> StartState:
    """Derived in-process exactly as the server and the clients derive it (same functions)."""
    from server_app.federation import sample_partitions

    data = load_dataset(cfg)
    parts = partition_indices(cfg, int(cfg.num_clients))
    counts = [np.bincount(data.y_train[p], minlength=int(cfg.dataset.num_classes)) for p in parts]
    model = build_model(cfg)
    weights = [v.detach().cpu().numpy() for v in model.state_dict().values()]
    everyone = list(range(int(cfg.num_clients)))
    sampled = [
        np.array(sample_partitions(int(cfg.seed), cfg.clients_per_round, r, everyone))
        for r in range(1, int(cfg.num_rounds) + 1)
    ]
    return StartState(
        sizes=[len(p) for p in parts],
        label_counts=counts,
        partition_digest=digest(parts),
        model_digest=digest(weights),
        sampling_digest=digest(sampled),
    )


def same_start(states: Sequence[StartState]) -> bool:
    first = states[0]
    return all(
        (s.partition_digest, s.model_digest, s.sampling_digest, s.sizes)
        == (first.partition_digest, first.model_digest, first.sampling_digest, first.sizes)
        for s in states
    )

"""FedDisco's client half: only the scalar d_k leaves the client (unless target=global)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord
from hydra import compose, initialize_config_dir

from client_app.algorithms.feddisco import handshake_metrics, train_metrics
from fl_system import protocol
from fl_system.cli import CONF_DIR


def _cfg(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=["dataset=digits", *overrides])


LABELS = np.array([0, 0, 1, 1] + [2] * 0)  # two of ten classes, equally


def test_d_is_kl_to_uniform() -> None:
    got = train_metrics(_cfg("algorithm=feddisco"), LABELS, ConfigRecord())
    assert got == {protocol.DISCO_D: pytest.approx(np.log(10 / 2))}
    assert handshake_metrics(_cfg("algorithm=feddisco"), lambda: LABELS) == {}


def test_nothing_is_sent_when_disco_is_off() -> None:
    assert train_metrics(_cfg("algorithm=fedavg"), LABELS, ConfigRecord()) == {}


def test_global_target_uses_the_broadcast_distribution() -> None:
    cfg = _cfg("algorithm=feddisco", "algorithm.disco.target=global")
    counts = handshake_metrics(cfg, lambda: LABELS)[protocol.DISCO_COUNTS]
    assert counts == [2.0, 2.0] + [0.0] * 8
    target = ConfigRecord({protocol.DISCO_TARGET: [0.5, 0.5] + [0.0] * 8})
    assert train_metrics(cfg, LABELS, target)[protocol.DISCO_D] == pytest.approx(0.0, abs=1e-9)

"""FedDisco's client half: only the scalar d_k leaves the client (unless target=global)."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord
from hydra import compose, initialize_config_dir

from client_app.addons.disco import DiscoReport
from fl_system.addons.disco import DISCO_COUNTS, DISCO_D, DISCO_TARGET
from fl_system.cli import CONF_DIR
from fl_system.config.experiment import build_client_addons


def _report(*overrides: str) -> list:
    """The client add-ons a composed config enables (digits: 10 classes)."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return build_client_addons(compose("config", overrides=["dataset=digits", *overrides]))


LABELS = np.array([0, 0, 1, 1] + [2] * 0)  # two of ten classes, equally


def test_d_is_kl_to_uniform() -> None:
    (report,) = _report("algorithm=feddisco")
    assert isinstance(report, DiscoReport)
    got = report.reply_metrics((np.zeros((4, 1)), LABELS), ConfigRecord())
    assert got == {DISCO_D: pytest.approx(np.log(10 / 2))}
    assert report.handshake_metrics(lambda: (np.zeros((4, 1)), LABELS)) == {}


def test_nothing_is_sent_when_disco_is_off() -> None:
    assert _report("algorithm=fedavg") == []


def test_global_target_uses_the_broadcast_distribution() -> None:
    (report,) = _report("algorithm=feddisco", "algorithm.disco.target=global")
    data = (np.zeros((4, 1)), LABELS)
    counts = report.handshake_metrics(lambda: data)[DISCO_COUNTS]
    assert counts == [2.0, 2.0] + [0.0] * 8
    target = ConfigRecord({DISCO_TARGET: [0.5, 0.5] + [0.0] * 8})
    assert report.reply_metrics(data, target)[DISCO_D] == pytest.approx(0.0, abs=1e-9)

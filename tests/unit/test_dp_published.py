"""What a DP run publishes beside its model: the evaluation, the account and the protocol's
counts; no statistic of the clients' un-noised updates unless asked for."""

from __future__ import annotations

import pytest

from fl_system.config.compose import compose_experiment
from fl_system.privacy import published_row, published_summary, withholds

ROW = {
    "round": 3,
    "wall_seconds": 1.5,
    "train_loss": 0.7,
    "test_accuracy": 0.9,
    "test_loss": 0.3,
    "participants": 4,
    "failures": 0,
    "bytes_up": 10,
    "bytes_down": 20,
    "bytes_up_train": 10,
    "seconds_train": 0.4,
    "compute_seconds_max": 0.2,
    "update_norm_max": 0.5,
    "update_norm_median": 0.4,
    "weight_0": 0.25,
    "client_acc_global": 0.8,
    "vtime_1": 3.0,
    "virtual_clock": 9.0,
    "dp_epsilon": 4.7,
}


@pytest.mark.parametrize(
    ("overrides", "withheld"),
    [
        ([], False),
        (["privacy=central_fixed"], True),
        (["privacy=local"], True),
        (["privacy=client_adaptive", "privacy.publish_client_stats=true"], False),
    ],
)
def test_a_dp_run_withholds_unless_told(overrides: list[str], withheld: bool) -> None:
    cfg = compose_experiment(overrides)
    assert withholds(cfg) is withheld
    kept = published_row(ROW, cfg)
    if not withheld:
        assert kept == ROW
        return
    assert sorted(kept) == sorted(
        [
            "round",
            "wall_seconds",
            "test_accuracy",
            "test_loss",
            "participants",
            "failures",
            "bytes_up",
            "bytes_down",
            "bytes_up_train",
            "seconds_train",
            "dp_epsilon",
        ]
    )


def test_the_summary_keeps_the_evaluation_and_the_account() -> None:
    summary = {"final_accuracy": 0.9, "bmta_local": 0.8, "virtual_clock": 4.0, "dp_epsilon": 2.0}
    cfg = compose_experiment(["privacy=central_fixed"])
    assert published_summary(summary, cfg) == {"final_accuracy": 0.9, "dp_epsilon": 2.0}
    assert published_summary(summary, compose_experiment([])) == summary

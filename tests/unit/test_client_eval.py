"""Per-client evaluation's pure parts (EFL spec 5): the stratified local split, the mean and
worst-decile client accuracy, and BMTA in the summary."""

from __future__ import annotations

import numpy as np
import pytest

from fl_system.data.local_split import stratified_split
from fl_system.learning.evaluation import client_accuracy_summary
from fl_system.records.results import summarize


def test_the_split_holds_out_the_fraction_of_every_label() -> None:
    y = np.array([0] * 10 + [1] * 5 + [2] * 1 + [3] * 2)
    train, test = stratified_split(y, 0.2, seed=0)
    assert np.bincount(y[test], minlength=4).tolist() == [2, 1, 0, 0]  # 2.0, 1.0, 0.2, 0.4
    assert sorted(np.concatenate([train, test]).tolist()) == list(range(len(y)))
    assert (np.diff(train) > 0).all() and (np.diff(test) > 0).all()
    # half rounds up, and a label always keeps one training example
    _, half = stratified_split(np.array([0, 0, 0, 0, 0, 1, 1]), 0.5, seed=0)
    assert np.bincount(np.array([0, 0, 0, 0, 0, 1, 1])[half]).tolist() == [3, 1]
    _, one = stratified_split(np.array([5]), 0.9, seed=0)
    assert one.size == 0


def test_the_split_is_a_function_of_the_seed() -> None:
    y = np.repeat(np.arange(3), 20)
    a, b, c = (stratified_split(y, 0.25, seed=s)[1] for s in (1, 1, 2))
    assert a.tolist() == b.tolist() and a.tolist() != c.tolist()
    with pytest.raises(ValueError, match=r"test_fraction must be in \(0, 1\), got 1.0"):
        stratified_split(y, 1.0, seed=0)


def test_mean_and_worst_decile_of_client_accuracies() -> None:
    accuracies = [0.9, 0.5, 1.0, 0.7, 0.8, 0.6, 0.95, 0.85, 0.75, 0.65, 0.2]  # 11 clients
    mean, worst = client_accuracy_summary(accuracies)
    assert mean == pytest.approx(sum(accuracies) / 11)
    assert worst == pytest.approx((0.2 + 0.5) / 2)  # ceil(1.1) = 2 lowest
    assert client_accuracy_summary([0.4, 0.6]) == (0.5, 0.4)
    with pytest.raises(ValueError, match="no client accuracies"):
        client_accuracy_summary([])


def test_summary_reports_the_best_and_last_mean_client_accuracy() -> None:
    rows = [
        {"round": 1, "test_accuracy": "0.5", "client_acc_global": "", "client_acc_local": ""},
        {"round": 2, "test_accuracy": "0.6", "client_acc_global": "0.7", "client_acc_local": "0.9"},
        {
            "round": 3,
            "test_accuracy": "0.7",
            "client_acc_global": "0.8",
            "client_acc_local": "0.85",
        },
        {
            "round": 4,
            "test_accuracy": "0.6",
            "client_acc_global": "0.75",
            "client_acc_local": "0.8",
        },
    ]
    summary = summarize(rows, target_accuracy=None)
    assert (summary["bmta_global"], summary["bmta_global_round"]) == (0.8, 3)
    assert (summary["bmta_local"], summary["bmta_local_round"]) == (0.9, 2)
    assert summary["final_client_acc_global"] == 0.75
    assert summary["final_client_acc_local"] == 0.8
    assert "bmta_global" not in summarize(rows[:1], target_accuracy=None)

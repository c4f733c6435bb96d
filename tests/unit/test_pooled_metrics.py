"""Federated evaluation's metrics from summed counts against scikit-learn on the union."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import balanced_accuracy_score, f1_score, log_loss, roc_auc_score

from fl_system.learning.pooled_metrics import (
    auroc_from_histogram,
    confusion,
    log_odds,
    pooled_metrics,
    score_histograms,
)


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def _nodes(num_classes: int, sizes=(300, 120, 57), scale=2.0, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for size in sizes:
        y = rng.integers(0, num_classes, size)
        logits = rng.normal(size=(size, num_classes)) * scale
        logits[np.arange(size), y] += 1.5  # better than chance, far from perfect
        out.append((logits, y))
    return out


@pytest.mark.parametrize("num_classes", [2, 5])
def test_summed_counts_give_the_unions_metrics(num_classes):
    nodes = _nodes(num_classes)
    matrix = sum(confusion(y, lg.argmax(1), num_classes) for lg, y in nodes)
    hist = sum(score_histograms(lg, y) for lg, y in nodes)
    losses = sum(float(-np.log(_softmax(lg)[np.arange(len(y)), y]).sum()) for lg, y in nodes)
    got = pooled_metrics(matrix, losses, hist)
    logits = np.concatenate([lg for lg, _ in nodes])
    y = np.concatenate([y for _, y in nodes])
    pred = logits.argmax(1)
    probs = _softmax(logits)
    assert got["accuracy"] == float((pred == y).mean())
    assert got["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(y, pred), abs=1e-15)
    assert got["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro"), abs=1e-15)
    assert got["loss"] == pytest.approx(log_loss(y, probs), rel=1e-12)
    exact = (
        roc_auc_score(y, probs[:, 1])
        if num_classes == 2
        else roc_auc_score(y, probs, multi_class="ovr", average="macro")
    )
    assert abs(got["auroc"] - exact) <= got["auroc_error"] + 1e-12
    assert abs(got["auroc"] - exact) < 1e-3 and got["auroc_error"] < 1e-3


def test_macro_f1_counts_a_class_that_is_only_predicted_as_scikit_learn_does():
    y = np.array([0, 0, 1, 1])
    pred = np.array([0, 2, 1, 1])
    got = pooled_metrics(confusion(y, pred, 3), 0.0)
    assert got["macro_f1"] == pytest.approx(f1_score(y, pred, average="macro"), abs=1e-15)
    assert got["balanced_accuracy"] == pytest.approx(balanced_accuracy_score(y, pred))


def test_auroc_from_a_histogram_by_hand():
    # negatives in bins 0, 1, 1; positives in bins 1, 2: pairs 6; wins: (1 vs 0) 1 + ties
    # 2 x 0.5 + (2 beats all three) 3 = 5 -> 5/6; shared-bin pairs 2 -> bound 2 / 12
    auc, bound = auroc_from_histogram(np.array([1, 2, 0]), np.array([0, 1, 1]))
    assert auc == pytest.approx(5 / 6) and bound == pytest.approx(1 / 6)


@pytest.mark.parametrize("magnitude", [1e-6, 1.0, 1e6])
def test_log_odds_are_stable_at_any_scale(magnitude):
    logits = np.array([[1.0, 2.0, 0.5]]) * magnitude
    p = _softmax(logits)
    got = log_odds(logits)
    assert np.all(np.isfinite(got))
    if magnitude <= 1.0:
        np.testing.assert_allclose(got, np.log(p / (1 - p)), rtol=1e-6, atol=1e-12)
    else:
        assert got[0].argmax() == 1 and got[0, 1] > 0 > got[0, 0]


@pytest.mark.parametrize("centre", [0.0, 1e6])
def test_regression_counts_summed_over_nodes_give_the_unions_mse_mae_and_r2(centre):
    from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

    from fl_system.learning.evaluation import RegressionCounts

    rng = np.random.default_rng(2)
    nodes = []
    for n in (40, 7, 113):
        y = centre + rng.normal(size=n) * 3.0
        nodes.append((y, y + rng.normal(size=n)))
    parts = [
        RegressionCounts(
            len(y),
            float(((p - y) ** 2).sum()),
            float(np.abs(p - y).sum()),
            float(y.sum()),
            float(((y - y.mean()) ** 2).sum()),
        )
        for y, p in nodes
    ]
    got = sum(parts[1:], parts[0]).metrics()
    y = np.concatenate([y for y, _ in nodes])
    p = np.concatenate([p for _, p in nodes])
    assert got["mse"] == pytest.approx(mean_squared_error(y, p), rel=1e-12)
    assert got["mae"] == pytest.approx(mean_absolute_error(y, p), rel=1e-12)
    assert got["r2"] == pytest.approx(r2_score(y, p), rel=1e-9)

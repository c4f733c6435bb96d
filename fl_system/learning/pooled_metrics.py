"""Federated evaluation's metrics, combined across nodes exactly from counts.

Each node scores the global model on its own test split and sends counts, never records:
the confusion matrix, the sum of its losses, and per class a histogram of one-vs-rest
log-odds scores for its positives and negatives. Summed over nodes these give accuracy,
balanced accuracy and macro F1 exactly as on the union of the nodes' data; AUROC comes from
the summed histograms, with the largest error that binning can cause stated beside it.
"""

from __future__ import annotations

import numpy as np

BINS = 4096  # histogram bins of the one-vs-rest log-odds, over [-LIMIT, LIMIT]
LIMIT = 20.0  # log-odds beyond +-20 (probabilities within 2e-9 of 0 or 1) share the end bins


def log_odds(logits: np.ndarray) -> np.ndarray:
    """(N, C) one-vs-rest log-odds log(p_c / (1 - p_c)) of softmax(logits), computed stably
    as l_c - logsumexp over the other classes (monotone in p_c, so AUROC is the same)."""
    logits = np.asarray(logits, dtype=np.float64)
    c = logits.shape[1]
    out = np.empty_like(logits)
    for k in range(c):
        others = np.delete(logits, k, axis=1)
        top = others.max(axis=1, keepdims=True)
        rest = top[:, 0] + np.log(np.exp(others - top).sum(axis=1))
        out[:, k] = logits[:, k] - rest
    return out


def confusion(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> np.ndarray:
    """(C, C) counts: row = true class, column = predicted class."""
    flat = np.asarray(y_true, np.int64) * num_classes + np.asarray(y_pred, np.int64)
    return np.bincount(flat, minlength=num_classes**2).reshape(num_classes, num_classes)


def score_histograms(logits: np.ndarray, y_true: np.ndarray) -> np.ndarray:
    """(C, 2, BINS) counts: for class c, [negatives, positives] per log-odds bin."""
    scores = log_odds(logits)
    c = scores.shape[1]
    bins = np.clip(((scores + LIMIT) / (2 * LIMIT) * BINS).astype(np.int64), 0, BINS - 1)
    out = np.zeros((c, 2, BINS), dtype=np.int64)
    y_true = np.asarray(y_true, np.int64)
    for k in range(c):
        positive = (y_true == k).astype(np.int64)
        np.add.at(out[k], (positive, bins[:, k]), 1)
    return out


def auroc_from_histogram(negatives: np.ndarray, positives: np.ndarray) -> tuple[float, float]:
    """(AUROC, largest error): a positive beats every negative in a lower bin and half of
    those in its own bin; pairs sharing a bin are the only ones binning can misorder, so the
    error is at most half their share of all pairs."""
    neg = np.asarray(negatives, np.float64)
    pos = np.asarray(positives, np.float64)
    pairs = neg.sum() * pos.sum()
    below = np.concatenate([[0.0], np.cumsum(neg)[:-1]])
    auc = float((pos * (below + 0.5 * neg)).sum() / pairs)
    return auc, float((pos * neg).sum() / (2 * pairs))


REGRESSION_METRICS = ("loss", "mse", "mae", "r2")  # what task=regression's evaluation reports


def pooled_moments(
    counts: np.ndarray, sums: np.ndarray, m2s: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The union's mean and centred sum of squares from each group's count, sum and centred
    sum of squares (axis 0: groups): M2 = sum M2_i + sum n_i (m_i - m)^2 (Chan et al.), exact
    where sums of raw squares lose precision to large values."""
    counts = np.asarray(counts, np.float64)
    sums = np.asarray(sums, np.float64)
    total = counts.sum(axis=0)
    mean = sums.sum(axis=0) / total
    spread = np.asarray(m2s, np.float64).sum(axis=0) + (
        counts * (sums / np.maximum(counts, 1) - mean) ** 2
    ).sum(axis=0)
    return mean, spread


def regression_metrics(n: float, sse: float, sae: float, m2_y: float) -> dict[str, float]:
    """task=regression: mean squared and absolute error, and R^2 = 1 - SSE / SST, where SST
    is the targets' squared deviation from their mean over all nodes (`m2_y`)."""
    mse = sse / n
    return {
        "loss": mse,
        "mse": mse,
        "mae": sae / n,
        "r2": 1.0 - sse / m2_y if m2_y > 0 else float("nan"),
        "examples": int(n),
    }


def pooled_metrics(
    matrix: np.ndarray, loss_sum: float, histograms: np.ndarray | None = None
) -> dict[str, float]:
    """The metrics of summed counts: accuracy, loss, balanced accuracy and macro F1 (over
    the classes that occur as a label or a prediction, as scikit-learn counts them) and, with
    histograms, macro one-vs-rest AUROC and its error bound (over classes with positives and
    negatives)."""
    matrix = np.asarray(matrix, np.float64)
    n = matrix.sum()
    true_pos = np.diag(matrix)
    actual = matrix.sum(axis=1)
    predicted = matrix.sum(axis=0)
    present = actual > 0
    seen = present | (predicted > 0)
    f1 = 2 * true_pos[seen] / (actual[seen] + predicted[seen])
    out = {
        "accuracy": float(true_pos.sum() / n),
        "loss": float(loss_sum / n),
        "balanced_accuracy": float((true_pos[present] / actual[present]).mean()),
        "macro_f1": float(f1.mean()),
        "examples": int(n),
    }
    if histograms is not None:
        scored = [
            auroc_from_histogram(h[0], h[1])
            for h in np.asarray(histograms)
            if h[0].sum() > 0 and h[1].sum() > 0
        ]
        if scored:
            out["auroc"] = float(np.mean([a for a, _ in scored]))
            out["auroc_error"] = float(np.mean([e for _, e in scored]))
    return out

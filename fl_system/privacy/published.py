"""What a run under differential privacy publishes beside its model.

The privacy account covers the released model only. Everything else a round computes from
the clients' replies (their training loss, update norms, weights, timings, per-client
accuracies, the virtual clock's per-client times) is a statistic of un-noised updates or of
the clients' data that no mechanism covers, so by default a DP run withholds it from
metrics.csv, summary.json, the trackers and the logs. What stays: the published model's
central evaluation, the account, and what the protocol fixes whatever the data (round,
participants, failures, bytes, the server's clock, who secure aggregation summed).
`privacy.publish_client_stats=true` publishes everything, with a warning that epsilon does
not cover it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fl_system.privacy.checks import mode

ROUND_COLUMNS = frozenset(
    {
        "round",
        "wall_seconds",
        "test_accuracy",
        "test_loss",
        "participants",
        "failures",
        "bytes_up",
        "bytes_down",
        "dp_epsilon",
        "dp_epsilon_void",
        "dp_local_epsilon",
        "dp_local_epsilon_void",
        "dp_local_delta",
        "secagg_summed",
        "secagg_dropped",
        "client_eval_bytes_down",
        "client_eval_bytes_up",
    }
)
# an exchange's traffic and the server's seconds for it (several exchanges a round)
ROUND_PREFIXES = ("bytes_up_", "bytes_down_", "seconds_")
SUMMARY_KEYS = frozenset(
    {
        "final_accuracy",
        "best_accuracy",
        "best_round",
        "rounds",
        "rounds_to_target",
        "seconds_to_target",
        "bytes_up",
        "bytes_down",
        "wall_seconds",
        "mean_last10_accuracy",
        "mean_last10_evaluations",
        "dp_epsilon",
        "dp_epsilon_void",
        "dp_delta",
        "dp_local_epsilon",
        "dp_local_epsilon_void",
        "dp_local_delta",
        "dp_noise",
    }
)
WARNING = (
    "privacy.publish_client_stats=true: metrics.csv, summary.json, the trackers and the logs "
    "get statistics of the clients' un-noised updates (train loss, update norms, weights, "
    "timings, per-client accuracies) that epsilon does not cover"
)


def withholds(cfg: DictConfig | None) -> bool:
    """Whether this run publishes only what its privacy account covers."""
    if cfg is None or mode(cfg) == "none":
        return False
    return not OmegaConf.select(cfg, "privacy.publish_client_stats", default=False)


def published_row(row: Mapping[str, Any], cfg: DictConfig | None) -> dict[str, Any]:
    """The round's columns this run may publish."""
    if not withholds(cfg):
        return dict(row)
    return {k: v for k, v in row.items() if k in ROUND_COLUMNS or k.startswith(ROUND_PREFIXES)}


def published_summary(summary: Mapping[str, Any], cfg: DictConfig | None) -> dict[str, Any]:
    """summary.json's entries this run may publish."""
    if not withholds(cfg):
        return dict(summary)
    return {k: v for k, v in summary.items() if k in SUMMARY_KEYS}

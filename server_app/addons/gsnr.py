"""The GSNR step schedule (FedGSNR: local steps from gradient signal-to-noise ratios), the
add-on's server half.

A step schedule that composes with FedAvg, FedProx and SCAFFOLD (`algorithm.gsnr.enabled=true`;
`algorithm=fedgsnr` is FedAvg with it on). Each round, before training:

    query:  the sampled clients get the global model w_r and reply m_k, v_k (the gradient
            statistics of `client_app/addons/gsnr.py`) and their data size n_k
    server: pooled m_g, v_g with p_k = n_k over the replies; n_opt_k, GSNR r_k, cos theta_k;
            integer steps E_k (sum = N * E_const in `matched` mode, round(E_const * n_opt_k)
            in `scaled` mode, optionally capped at `max_steps`)  -- `fl_system.addons.gsnr`
    train:  every client with E_k >= 1 trains E_k steps (its message overrides
            train.local_steps); clients with E_k = 0, or whose statistics are missing or not
            finite, get no training message and are left out of the average

The base strategy then averages the trained clients with its own weights renormalised over
them. Per client, `steps_<pid>`, `n_opt_<pid>`, `gsnr_<pid>` and `cos_<pid>` go to the
round's metrics, with the allocation's entropy and max E_k; summary.json gets each partition's
median and mean GSNR over the rounds it was sampled (`contribution`) and the partitions below
half the cross-client median (`low_contribution`). Spec: shared/specs/fedgsnr.md.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict

from fl_system.addons import check_settings, gsnr
from fl_system.addons.gsnr import GSNR_MEAN, GSNR_STATS, GSNR_VARIANCE
from fl_system.messages import protocol
from fl_system.records.results import partition_columns
from server_app.addons import StepSchedule
from server_app.rounds import ClientFailure, Exchange, PlanSteps, RoundPlan

log = logging.getLogger(__name__)

STATS_EXCHANGE = "gsnr"  # the label of the statistics exchange in metrics.csv
LOW_CONTRIBUTION_FACTOR = 0.5  # flag partitions below this share of the median GSNR


class GsnrSchedule(StepSchedule):
    """Asks the sampled clients for gradient statistics and gives each its local steps."""

    name = "gsnr"
    classification_only = "its gradient statistics are of each sample's cross-entropy"

    def __init__(
        self,
        *,
        local_steps: int | None,
        batch_size: int,
        allocation: str = "matched",
        max_steps: int | None = None,
    ) -> None:
        if local_steps is None:
            raise ValueError(
                "algorithm.gsnr needs train.local_steps (E_const, the steps every client runs "
                "without GSNR), e.g. train.local_steps=20"
            )
        check_settings(self.name, {"allocation": allocation, "max_steps": max_steps})
        self.local_steps = int(local_steps)
        self.batch_size = int(batch_size)
        self.allocation = allocation
        self.max_steps = max_steps

    def prepare(self, plan: RoundPlan) -> PlanSteps:
        config = ConfigRecord({**plan.config, protocol.QUESTION: GSNR_STATS})
        query = [
            Message(
                content=RecordDict({protocol.ARRAYS: plan.arrays, protocol.CONFIG: config}),
                dst_node_id=node_id,
                message_type=protocol.ASK,
            )
            for node_id in plan.nodes
        ]
        replies = yield Exchange(query, label=STATS_EXCHANGE)
        stats, failures = _read_statistics(replies, plan.nodes)
        for failure in failures:
            log.warning(
                "round %d: node %d left out of training: %s",
                plan.round,
                failure.node_id,
                failure.reason,
            )
        if not stats:
            return replace(plan, nodes={}, failures=(*plan.failures, *failures))
        steps, metrics = self.allocate(plan.round, stats)
        node_of = {pid: node for node, pid in plan.nodes.items()}
        trained = {node_of[pid]: pid for pid, e in steps.items() if e >= 1}
        return replace(
            plan,
            nodes=trained,
            node_config={
                **plan.node_config,
                **{
                    pid: {**plan.node_config.get(pid, {}), protocol.LOCAL_STEPS: steps[pid]}
                    for pid in trained.values()
                },
            },
            metrics={**plan.metrics, **metrics},
            failures=(*plan.failures, *failures),
        )

    def allocate(
        self, rnd: int, stats: Mapping[int, tuple[np.ndarray, np.ndarray, int]]
    ) -> tuple[dict[int, int], dict[str, float]]:
        """E_k per partition, and the round's metrics, from (m_k, v_k, n_k) per partition."""
        pids = sorted(stats)
        means = np.stack([stats[p][0] for p in pids]).astype(np.float64)
        variances = np.stack([stats[p][1] for p in pids]).astype(np.float64)
        sizes = [float(stats[p][2]) for p in pids]
        m_g, v_g = gsnr.global_statistics(means, variances, sizes)
        terms = gsnr.client_terms(means, variances, m_g, v_g, self.batch_size)
        if terms.n_opt.sum() <= 0:
            log.warning(
                "round %d: every client's n_opt is 0 (zero gradients?): each trains E_const=%d "
                "steps",
                rnd,
                self.local_steps,
            )
        steps = gsnr.allocate_steps(
            terms.n_opt, self.local_steps, allocation=self.allocation, max_steps=self.max_steps
        )
        metrics: dict[str, float] = {}
        for i, pid in enumerate(pids):
            metrics[f"steps_{pid}"] = int(steps[i])
            metrics[f"n_opt_{pid}"] = float(terms.n_opt[i])
            metrics[f"gsnr_{pid}"] = float(terms.gsnr[i])
            metrics[f"cos_{pid}"] = float(terms.cos[i])
        metrics["gsnr_entropy"] = gsnr.allocation_entropy(terms.n_opt)
        metrics["gsnr_max_steps"] = int(steps.max())
        return {pid: int(e) for pid, e in zip(pids, steps, strict=True)}, metrics

    def summarize(self, rows: Sequence[Mapping[str, object]]) -> dict[str, object]:
        """Contribution: median and mean GSNR per partition over the rounds it was sampled."""
        scores = gsnr.contribution(partition_columns(rows, "gsnr_"))
        return {
            "contribution": {str(pid): s for pid, s in scores.items()},
            "low_contribution": gsnr.low_contribution(scores, LOW_CONTRIBUTION_FACTOR),
        }


def _read_statistics(
    replies: Sequence[Message], nodes: Mapping[int, int]
) -> tuple[dict[int, tuple[np.ndarray, np.ndarray, int]], list[ClientFailure]]:
    """(m_k, v_k, n_k) by partition id for the usable replies; the others with a reason."""
    stats: dict[int, tuple[np.ndarray, np.ndarray, int]] = {}
    failures: list[ClientFailure] = []
    size = None
    for msg in replies:
        node = msg.metadata.src_node_id
        problem, entry = _statistics(msg)
        if entry is not None:
            entries = entry[0].size
            if size is not None and entries != size:
                problem = f"statistics have {entries} entries, other clients' {size}"
            size = entries if size is None else size
        if problem is not None:
            failures.append(ClientFailure(node, f"gradient statistics query: {problem}"))
            continue
        stats[nodes[node]] = entry  # type: ignore[assignment]
    return stats, failures


def _statistics(msg: Message) -> tuple[str | None, tuple[np.ndarray, np.ndarray, int] | None]:
    if msg.has_error():
        return f"client error: {msg.error.reason}", None
    record = msg.content.array_records.get(GSNR_STATS)
    metrics = msg.content.metric_records.get(protocol.METRICS)
    if record is None or metrics is None or protocol.NUM_EXAMPLES not in metrics:
        return f"reply lacks the '{GSNR_STATS}' record or its metrics", None
    if GSNR_MEAN not in record or GSNR_VARIANCE not in record:
        return f"'{GSNR_STATS}' lacks mean or variance", None
    mean = record[GSNR_MEAN].numpy().astype(np.float64).ravel()
    variance = record[GSNR_VARIANCE].numpy().astype(np.float64).ravel()
    if mean.shape != variance.shape:
        return f"mean has {mean.size} entries, variance {variance.size}", None
    if not (np.isfinite(mean).all() and np.isfinite(variance).all()):
        return "statistics are NaN or infinite", None
    if (variance < 0).any():
        return "variance is negative", None
    n = int(metrics[protocol.NUM_EXAMPLES])
    if n < 1:
        return f"reported {protocol.NUM_EXAMPLES}={n}", None
    return None, (mean, variance, n)

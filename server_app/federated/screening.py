"""Reply screening, in one home: what makes a training reply unusable before aggregation.

A reply is unpacked (`unpack_replies`: a failure, a rejection by its client, a model whose
layout differs from the global one, a missing or bad identity), screened against the round's
medians (`screen_replies`: an update norm or a claimed example count far above them, the
`aggregation.norm_ratio` / `examples_ratio` guards, `fl_system.learning.screening`), then
`reject`ed by the algorithm. The server's own reading of a reply (decompression, the virtual
clock's deadline) marks one it cannot use with `protocol.rejected`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import numpy as np
from flwr.app import ArrayRecord, Message, MetricRecord

from fl_system.learning.robust import update_norm
from fl_system.learning.screening import above_median
from fl_system.messages import protocol
from server_app.federated.replies import ClientReply
from server_app.rounds import ClientFailure, RoundPlan

log = logging.getLogger(__name__)


def layout_problem(expected: ArrayRecord, got: ArrayRecord) -> str | None:
    """Why a reply's model cannot be averaged with the global model: its layers must have the
    same names in the same order, shapes and dtypes (None: they do)."""
    if list(got.keys()) != list(expected.keys()):
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        if not missing and not extra:
            return "model layers are in another order than the global model's"
        return (
            "model layers differ from the global model's"
            + (f": missing {missing}" if missing else "")
            + (f"{';' if missing else ':'} unexpected {extra}" if extra else "")
        )
    for name in expected:
        want, have = expected[name], got[name]
        if tuple(have.shape) != tuple(want.shape):
            return (
                f"layer '{name}' has shape {tuple(have.shape)}, "
                f"the global model's {tuple(want.shape)}"
            )
        if have.dtype != want.dtype:
            return f"layer '{name}' has dtype {have.dtype}, the global model's {want.dtype}"
    return None


def identity_problem(metrics: MetricRecord) -> str | None:
    """Why a reply's partition id or example count cannot be used: both must be integers, the
    id at least 0 and the count at least 1 (None: they can)."""
    pid, count = metrics[protocol.PARTITION_ID], metrics[protocol.NUM_EXAMPLES]
    if not _is_int(pid) or pid < 0:
        return f"metric '{protocol.PARTITION_ID}' is {pid!r}, not a partition id"
    for_whom = f"partition {pid}: metric '{protocol.NUM_EXAMPLES}'"
    if not _is_int(count):
        return f"{for_whom} is {count!r} ({type(count).__name__}), not an integer"
    if count < 1:
        return f"{for_whom} is {count}: a model trained on no data"
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


def unpack_replies(
    replies: Iterable[Message], expected: ArrayRecord | None = None
) -> tuple[list[ClientReply], list[ClientFailure]]:
    """Split replies into usable ones (sorted by partition id) and failures with a reason.

    With `expected` (the model that was sent), a reply whose model does not match its layout
    is a failure: averaging it would broadcast or reinterpret layers silently."""
    ok: list[ClientReply] = []
    failed: list[ClientFailure] = []
    for msg in replies:
        node = msg.metadata.src_node_id
        if msg.has_error():
            failed.append(ClientFailure(node, f"client error: {msg.error.reason}"))
            continue
        content = msg.content
        if protocol.REJECTED in content.config_records:
            reason = str(content.config_records[protocol.REJECTED][protocol.REASON])
            failed.append(ClientFailure(node, reason))
            continue
        metrics = content.metric_records.get(protocol.METRICS)
        arrays = content.array_records.get(protocol.ARRAYS)
        missing = [
            name
            for name, present in (
                (f"ArrayRecord '{protocol.ARRAYS}'", arrays is not None),
                (f"MetricRecord '{protocol.METRICS}'", metrics is not None),
            )
            if not present
        ]
        if not missing:
            missing = [
                f"metric '{key}'"
                for key in (protocol.NUM_EXAMPLES, protocol.PARTITION_ID)
                if key not in metrics
            ]
        if missing:
            failed.append(ClientFailure(node, "reply lacks " + ", ".join(missing)))
            continue
        problem = identity_problem(metrics)
        if problem is not None:
            failed.append(ClientFailure(node, problem))
            continue
        pid = metrics[protocol.PARTITION_ID]
        if expected:
            problem = layout_problem(expected, arrays)
            if problem is not None:
                failed.append(ClientFailure(node, f"partition {pid}: {problem}"))
                continue
        layers = arrays.to_numpy_ndarrays()
        broken = [name for name, a in zip(arrays, layers, strict=True) if not np.isfinite(a).all()]
        if broken:
            failed.append(
                ClientFailure(
                    node,
                    f"partition {pid}: local model has NaN or inf in {len(broken)} of "
                    f"{len(layers)} layers, first '{broken[0]}' (local training diverged: try "
                    "a lower train.lr)",
                )
            )
            continue
        ok.append(
            ClientReply(
                node_id=node,
                partition_id=int(metrics[protocol.PARTITION_ID]),
                num_examples=int(metrics[protocol.NUM_EXAMPLES]),
                arrays=layers,
                metrics=metrics,
                content=content,
            )
        )
    ok.sort(key=lambda r: r.partition_id)
    return ok, failed


def screen_replies(
    replies: Sequence[ClientReply],
    norms: Sequence[float],
    norm_ratio: float | None,
    examples_ratio: float | None,
) -> tuple[list[tuple[ClientReply, float]], list[ClientFailure]]:
    """(reply, update norm) of the replies within `norm_ratio` x the round's median update
    norm and `examples_ratio` x its median example count; the others as failures with the
    figures (None: that screen is off)."""
    counts = [float(r.num_examples) for r in replies]
    big_norm = above_median(norms, norm_ratio)
    big_count = above_median(counts, examples_ratio)
    kept, failures = [], []
    for reply, norm, far, many in zip(replies, norms, big_norm, big_count, strict=True):
        why = None
        if far:
            why = (
                f"update norm {norm:.4g} is above aggregation.norm_ratio={norm_ratio:g}"
                f" x the round's median {float(np.median(norms)):.4g}"
            )
        elif many:
            why = (
                f"claims {reply.num_examples} examples, above aggregation.examples_ratio="
                f"{examples_ratio:g} x the round's median {float(np.median(counts)):g}"
            )
        if why is None:
            kept.append((reply, norm))
        else:
            failures.append(ClientFailure(reply.node_id, f"partition {reply.partition_id}: {why}"))
    return kept, failures


class ReplyScreening:
    """The strategy's side of screening: its guards' ratios (`norm_ratio`, `examples_ratio`)
    and the model each reply started from; an algorithm refuses a well-formed reply in
    `reject`."""

    norm_ratio: float | None
    examples_ratio: float | None
    _numpy_cache: tuple[ArrayRecord, list[np.ndarray]] | None = None  # plan.arrays as numpy

    def usable(
        self, plan: RoundPlan, replies: Sequence[Message]
    ) -> tuple[list[ClientReply], list[float], list[ClientFailure]]:
        """The replies the rule can aggregate, with their update norms, and the failures (each
        logged with its reason): unpacked, screened against the round's medians, then
        `reject`ed by the algorithm."""
        unpacked, failures = unpack_replies(replies, plan.arrays)
        ok, norms = [], []
        for reply, norm in self.screen(plan, unpacked, failures):
            problem = self.reject(reply)
            if problem is None:
                ok.append(reply)
                norms.append(norm)
            else:
                failures.append(ClientFailure(reply.node_id, problem))
        for failure in failures:
            partition = plan.nodes.get(failure.node_id)
            held = "" if partition is None else f" (partition {partition})"
            log.warning(
                "round %d: node %d%s dropped: %s", plan.round, failure.node_id, held, failure.reason
            )
        return ok, norms, failures

    def screen(
        self, plan: RoundPlan, replies: list[ClientReply], failures: list[ClientFailure]
    ) -> list[tuple[ClientReply, float]]:
        """The replies whose update norm and claimed example count are within
        aggregation.norm_ratio / examples_ratio x the round's median, with their update norms;
        the others go to `failures` with the figures."""
        norms = [update_norm(r.arrays, self.reference(plan, r.partition_id, r)) for r in replies]
        kept, refused = screen_replies(replies, norms, self.norm_ratio, self.examples_ratio)
        failures.extend(refused)
        return kept

    def reference(self, plan: RoundPlan, partition_id: int, reply: ClientReply) -> list[np.ndarray]:
        """The model this partition started from (its update is its reply minus this); zeros
        when the round sent no model (strategy tests on bare replies)."""
        if not plan.arrays:
            return [np.zeros_like(w) for w in reply.arrays]
        return self.as_numpy(plan.arrays)

    def as_numpy(self, arrays: ArrayRecord) -> list[np.ndarray]:
        """`arrays` as numpy layers, converted once however many replies ask."""
        if self._numpy_cache is None or self._numpy_cache[0] is not arrays:
            self._numpy_cache = (arrays, arrays.to_numpy_ndarrays())
        return self._numpy_cache[1]

    def reject(self, reply: ClientReply) -> str | None:
        """Why this algorithm cannot use a well-formed reply (None: it can)."""
        return None

"""The shape of a round: a sequence of exchanges that the strategy drives (DESIGN.md §7).

A strategy's `round(plan)` is a generator. It yields an `Exchange` (messages to send), the
driver sends them and resumes it with the replies, and at the end it returns a
`RoundResult`. The driver owns everything around the exchanges: one deadline for the whole
round, bytes and time per exchange label, metrics, evaluation, checkpoints.
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field

from flwr.app import ArrayRecord, ConfigRecord, Message

from server_app.compression import UpdateTally

Scalar = bool | int | float | str


class RunFailed(RuntimeError):
    """The federation cannot make progress (no client replied usefully, all expelled)."""


class NodeRefused(RunFailed):
    """A node does not fit the run (its data, its model) and the run stops: bad input, so
    fl-run exits 2."""


@dataclass(frozen=True)
class ClientFailure:
    """A client that could not be used this round, and why."""

    node_id: int
    reason: str


def grouped_reasons(failures: list[ClientFailure]) -> str:
    """Failures by reason, so ten clients failing alike read as one line: by partition when
    the reason names one ("partition 3: ..."), else by node; ids in order, whatever order the
    replies came in."""
    who: dict[tuple[str, str], list[int]] = {}
    for f in failures:
        named = re.match(r"partition (\d+): (.*)", f.reason, flags=re.S)
        kind, ident, reason = (
            ("partition", int(named.group(1)), named.group(2))
            if named
            else ("node", f.node_id, f.reason)
        )
        who.setdefault((kind, reason), []).append(ident)
    return "; ".join(
        f"{kind}{'s' if len(ids) > 1 else ''} {', '.join(map(str, sorted(ids)))}: {reason}"
        for (kind, reason), ids in who.items()
    )


@dataclass(frozen=True)
class Exchange:
    """Messages to send at once; `label` names the exchange in metrics (bytes, seconds)."""

    messages: list[Message]
    label: str = "train"


@dataclass(frozen=True)
class RoundPlan:
    """What a round starts from and, as steps before training refine it, whom it trains.

    `node_config` holds per-partition settings that travel only in that client's message and
    override the run's `train.*` there (e.g. FedGSNR's local steps). `metrics` and `failures`
    collect what the steps before training found out; they end up in the round's result.
    """

    round: int
    arrays: ArrayRecord  # the global model at the start of the round
    config: ConfigRecord  # the round's settings, sent to every client
    nodes: Mapping[int, int]  # node id -> partition id of the clients to train
    node_config: Mapping[int, Mapping[str, Scalar]] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    failures: tuple[ClientFailure, ...] = ()


@dataclass(frozen=True)
class RoundResult:
    """What a round produced; `arrays` is None when no reply could be used.

    `scored` is a model to evaluate in place of the global one (FedCat inside a cycle: the
    global model stands still while its copies train, so the copies' average is scored).
    """

    arrays: ArrayRecord | None
    metrics: dict[str, float]
    failures: list[ClientFailure]
    participants: int  # clients whose replies went into the new model
    scored: ArrayRecord | None = None


RoundSteps = Generator[Exchange, list[Message], RoundResult]
PlanSteps = Generator[Exchange, list[Message], RoundPlan]


def no_exchange(plan: RoundPlan) -> PlanSteps:
    """A step before training that sends nothing and leaves the plan as it is."""
    return plan
    yield  # unreachable: makes this function a generator


@dataclass
class RoundRecord:
    """One round as a strategy ran it, for whoever drives the rounds (fl_system's driver
    reads it after `aggregate_train`; Flower's loop needs only the returned model).

    `arrays` is the new global model as clients hold it (None: no usable reply, or an idle
    round), `replies` every reply of the round,
    `updates` what compressed updates weighed, `broadcast` what a compressed broadcast of the
    new model weighed. `idle`: nobody could work (stragglers), so no exchange ran at all.
    """

    plan: RoundPlan
    chosen: int  # partitions chosen before stragglers and pre-training steps
    result: RoundResult
    arrays: ArrayRecord | None
    replies: list[Message]
    updates: UpdateTally
    broadcast: dict[str, int]
    idle: bool = False

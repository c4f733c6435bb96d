"""The virtual clock in a round (system=profiles|trace): who is online, who fits a deadline,
who finished first, and how long the round took on the clients' devices and networks.

Accounting only, from what the server already has: the sizes of the messages each node
received and sent this round (the courier's), the local steps each reply reports, and each
client's profile (`fl_system.heterogeneity`). Before training, a round samples among the clients
online at its virtual start (waiting, if nobody is, until somebody is) and, under
`system.round_deadline`, gives each client the steps that fit (estimating its bytes from the
last round's): all E, part of them where the strategy uses partial work, or none (the client
is not sent anything, and the round lasts the whole deadline). After training, a reply that
finished past the deadline, or after its client's session ended, is rejected as a failure;
under `system.first_k` only the first k finishers count. The exchanges of per-client
evaluation (client_eval) are measurement and are not on the clock, nor are handshakes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from flwr.app import ArrayRecord, Message

from fl_system.heterogeneity import SystemModel
from fl_system.heterogeneity.clock import (
    Profile,
    client_seconds,
    first_finishers,
    round_seconds,
    steps_within,
)
from fl_system.learning.compression import Compression
from fl_system.messages import protocol
from server_app.exchange import NodeMessages
from server_app.rounds import RoundPlan, RunFailed

log = logging.getLogger(__name__)

# A message's bytes on the wire beyond its arrays (records, metadata, Flower's object framing):
# what the first round's estimate adds before any message was measured
FRAMING, FRAMING_BYTES = 1.02, 16_384
_NOW = "system/now"
_ESTIMATE = "system/estimate"


@dataclass
class _Round:
    """What the clock learns of a round between its plan and its close."""

    start: float  # virtual start, after waiting for clients to come online
    wait: float
    online: int | None = None
    dropped_before: int = 0  # sent nothing: not even one step fits the deadline
    finish: dict[int, float] = field(default_factory=dict)  # partition -> seconds into the round
    counted: dict[int, float] = field(default_factory=dict)  # the replies that count
    missed: int = 0
    offline: int = 0
    late: int = 0


class VirtualClock:
    """The run's virtual time, advanced round by round."""

    def __init__(
        self,
        system: SystemModel,
        *,
        compression: Compression | None = None,
        step_cost: float = 1.0,
    ) -> None:
        self.system = system
        self.now = 0.0
        self.compression = compression  # compression.up: estimates a reply before one is seen
        self.step_cost = step_cost  # the strategy's local step against plain SGD's
        self.estimate: tuple[float, float] | None = None  # last round's largest (down, up)
        self._round: _Round | None = None
        self._warned = False

    # ----- before training -----------------------------------------------------------------
    def online(self, server_round: int, partitions: Sequence[int]) -> list[int]:
        """The partitions online at the round's virtual start (which waits for one)."""
        availability = self.system.availability
        start = self.now
        if availability is not None:
            start = availability.next_online(partitions, self.now)
            if math.isinf(start):
                raise RunFailed(
                    f"round {server_round}: no client is online at virtual second "
                    f"{self.now:.0f} or ever after (system.availability)"
                )
            partitions = availability.online(partitions, start)
        self._round = _Round(start=start, wait=start - self.now)
        if availability is not None:
            self._round.online = len(partitions)
        return list(partitions)

    def fit_deadline(self, plan: RoundPlan, *, partial_work: bool) -> RoundPlan:
        """Each client's steps under system.round_deadline: those that fit, if the strategy can
        use partial work and all E do not; clients that cannot reply in time are left out."""
        system, opened = self.system, self._open()
        if system.deadline is None:
            return plan
        assert system.local_steps is not None  # checked with the config
        down, up = self._estimated_bytes(plan.arrays)
        steps = {
            pid: steps_within(
                system.deadline,
                self._profile(pid),
                down=[down],
                up=[up],
                batch_size=system.batch_size,
                steps=system.local_steps,
            )
            for pid in plan.nodes.values()
        }
        full = system.local_steps
        usable = {p for p, s in steps.items() if s == full or (s > 0 and partial_work)}
        node_config = {pid: dict(c) for pid, c in plan.node_config.items()}
        for pid in usable:
            if steps[pid] < full:
                node_config.setdefault(pid, {})[protocol.LOCAL_STEPS] = steps[pid]
        opened.dropped_before = len(steps) - len(usable)
        metrics = {
            **plan.metrics,
            "deadline_partial": sum(steps[p] < full for p in usable),
            "deadline_dropped": opened.dropped_before,
            # the steps each client was sent: 0 for one dropped, which sent nothing
            **{f"budget_{pid}": s if pid in usable else 0 for pid, s in sorted(steps.items())},
        }
        nodes = {node: pid for node, pid in plan.nodes.items() if pid in usable}
        return replace(plan, nodes=nodes, node_config=node_config, metrics=metrics)

    def _profile(self, pid: int) -> Profile:
        """The client's profile, its seconds per sample scaled by what a step costs."""
        profile = self.system.profiles[pid]
        if self.step_cost == 1.0:
            return profile
        return replace(profile, seconds_per_sample=profile.seconds_per_sample * self.step_cost)

    def _estimated_bytes(self, model: ArrayRecord) -> tuple[float, float]:
        """A training message's bytes each way: the largest of the last round, or the model's
        size (and the codec's estimate of an update) before any was seen."""
        if self.estimate is not None:
            return self.estimate
        dense = FRAMING * sum(len(a.data) for a in model.values()) + FRAMING_BYTES
        if self.compression is None:
            return dense, dense
        shapes = [a.shape for a in model.values()]
        return dense, self.compression.analytic_bits(shapes) / 8 * FRAMING + FRAMING_BYTES

    # ----- after training ------------------------------------------------------------------
    def settle(
        self,
        plan: RoundPlan,
        replies: list[Message],
        messages: Mapping[int, NodeMessages],
    ) -> list[Message]:
        """The replies that count: each client's finishing time from its bytes and steps; one
        that missed the deadline or outlived its session is marked rejected (a failure), and
        under first_k the later finishers are left out."""
        system, opened = self.system, self._open()
        finished: dict[int, Message] = {}
        for reply in replies:
            node = reply.metadata.src_node_id
            pid = plan.nodes.get(node)
            if reply.has_error() or pid is None:
                continue
            sent = messages.get(node, NodeMessages())
            if not sent.up and not self._warned:
                self._warned = True
                log.warning(
                    "system: the training exchange did not go through fl_system's courier "
                    "(Flower's own Strategy.start?): its bytes are not on the virtual clock"
                )
            t = client_seconds(
                self._profile(pid),
                down=sent.down,
                up=sent.up,
                steps=_steps(reply, system.local_steps),
                batch_size=system.batch_size,
            )
            opened.finish[pid] = t
            reason = self._refusal(pid, t)
            if reason is not None:
                reply.content = protocol.rejected(reply.content, reason)
            else:
                finished[pid] = reply
        if messages:
            self.estimate = (
                float(max((max(m.down, default=0) for m in messages.values()), default=0)),
                float(max((max(m.up, default=0) for m in messages.values()), default=0)),
            )
        counted = {pid: opened.finish[pid] for pid in finished}
        if system.first_k is not None:
            counted = {p: counted[p] for p in first_finishers(counted, system.first_k)}
        late = {id(finished[p]) for p in finished if p not in counted}
        opened.late = len(late)
        opened.counted = counted
        return [r for r in replies if id(r) not in late]

    def _refusal(self, pid: int, t: float) -> str | None:
        """Why a reply finishing `t` seconds into the round does not count (None: it does)."""
        system, opened = self.system, self._open()
        if system.deadline is not None and t > system.deadline:
            opened.missed += 1
            return f"missed the round deadline: would finish at {t:.1f} s of {system.deadline} s"
        if system.availability is not None:
            end = system.availability.session_end(pid, opened.start)
            if end < opened.start + t:
                opened.offline += 1
                return (
                    f"went offline at virtual second {end:.0f}, before finishing at "
                    f"{opened.start + t:.0f}"
                )
        return None

    def close(self) -> dict[str, float]:
        """The round's clock columns; the clock moves on by the round's virtual time."""
        opened, system = self._open(), self.system
        seconds = opened.wait + round_seconds(
            opened.counted,
            deadline=system.deadline,
            missed_deadline=bool(opened.dropped_before or opened.missed),
            first_k=system.first_k,
        )
        self.now = opened.start - opened.wait + seconds
        self._round = None
        columns: dict[str, float] = {
            "virtual_seconds": seconds,
            "virtual_clock": self.now,
            **{f"vtime_{pid}": t for pid, t in sorted(opened.finish.items())},
        }
        if system.availability is not None:
            columns.update(
                virtual_wait=opened.wait, online=opened.online or 0, went_offline=opened.offline
            )
        if system.deadline is not None:
            columns["missed_deadline"] = opened.missed
        if system.first_k is not None:
            columns["late_discarded"] = opened.late
        return columns

    @property
    def rejected(self) -> int:
        """Replies of the open round the clock rejected (past the deadline, session over)."""
        opened = self._open()
        return opened.missed + opened.offline

    def _open(self) -> _Round:
        if self._round is None:  # a plan that never asked who is online (Flower's loop)
            self._round = _Round(start=self.now, wait=0.0)
        return self._round

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        state = {_NOW: np.array(self.now)}
        if self.estimate is not None:
            state[_ESTIMATE] = np.array(self.estimate)
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        if _NOW in state:
            self.now = float(state[_NOW])
        if _ESTIMATE in state:
            down, up = (float(x) for x in state[_ESTIMATE])
            self.estimate = (down, up)

    @staticmethod
    def owns(key: str) -> bool:
        return key in (_NOW, _ESTIMATE)


def _steps(reply: Message, default: int | None) -> float:
    """The local steps a reply reports (the run's E if it reports none)."""
    metrics = reply.content.metric_records.get(protocol.METRICS)
    if metrics is not None and protocol.NUM_STEPS in metrics:
        return float(metrics[protocol.NUM_STEPS])
    return float(default or 0)

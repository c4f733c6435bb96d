"""Which SuperNode holds which partition.

Node ids are random and change when a SuperNode restarts, so the server learns each node's
partition id with a handshake (a query message that also carries the experiment config) and
keys all per-client state by partition id.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid

from fl_system.messages import protocol
from fl_system.records.run_log import warning_line
from server_app.exchange import exchange
from server_app.rounds import RunFailed

log = logging.getLogger(__name__)

# the message or the node was lost on the way: the node may come back. Any other error is the
# node's ClientApp failing (its code, its data, or its process dying: Ray's ActorDiedError
# comes as UNKNOWN), which waiting does not mend.
LOST = (
    ErrorCode.MESSAGE_UNAVAILABLE,
    ErrorCode.REPLY_MESSAGE_UNAVAILABLE,
    ErrorCode.NODE_UNAVAILABLE,
)
NODE_LOGS = "each node's log has its traceback"
PROBE_SECONDS = 15.0  # how long a partition's holder has to prove it is alive
NOTICE_SECONDS = 10.0  # how long to wait for a turned-away node to take note
# A node left out (its handshake failed, or it was turned away) is asked again this long
# after, the wait doubling each time the same node is left out again up to RETRY_MAX_SECONDS:
# with SuperNode authentication a restarted node keeps its id, so its return looks like
# nothing happened, and a node whose reply was lost (it was down) is back within a round.
RETRY_SECONDS = 10.0
RETRY_MAX_SECONDS = 160.0


@dataclass
class LeftOut:
    """A node the run does not use (yet): when to ask it again, and how long the wait was."""

    ask_at: float
    wait: float = RETRY_SECONDS


class NodeRegistry:
    """Maps connected node ids to partition ids, handshaking new nodes as they appear."""

    def __init__(
        self,
        grid: Grid,
        run_config_json: str,
        *,
        num_partitions: int,
        on_join: Callable[[int, MetricRecord], None] | None = None,
        vet: Callable[[int, Message], str | None] | None = None,
        logs: str = NODE_LOGS,
        say: Callable[[str], None] = log.info,
    ) -> None:
        self._grid = grid
        self._say = say  # joins, returns, departures and the wait for clients: the run's log
        self._logs = logs  # where a failed ClientApp's traceback is, said with its error
        self._on_join = on_join
        self._vet = vet  # (partition, handshake reply) -> why the node is left out, or None
        self._config_json = run_config_json
        self._num_partitions = num_partitions
        self.partition_of: dict[int, int] = {}
        self._left_out: dict[int, LeftOut] = {}  # nodes whose handshake failed or clashed
        self._last_holder: dict[int, int] = {}  # partition -> the node that held it last
        self._last_held: Counter[int] = Counter()  # node -> partitions it held last
        self._failed: dict[int, str] = {}  # node -> why its ClientApp raised at the handshake
        self._refused: dict[int, str] = {}  # node -> why its site refused this run
        self.excluded: set[int] = set()  # partitions whose data the run left out
        self._bytes_up = 0
        self._bytes_down = 0

    def refresh(self, timeout: float, gone: Iterable[int] = ()) -> dict[int, int]:
        """Handshake nodes not seen before; forget nodes that left (also those in `gone`: the
        SuperLink found them offline, though they may be back by now). Returns node ->
        partition."""
        online = set(self._grid.get_node_ids())
        for node in (set(self.partition_of) - online) | (set(gone) & set(self.partition_of)):
            self._say(f"node {node} (partition {self.partition_of.pop(node)}) left")
        for gone in set(self._left_out) - online:  # asked at once when it comes back
            del self._left_out[gone]
            self._failed.pop(gone, None)
        now = time.monotonic()
        new = sorted(
            n
            for n in online - set(self.partition_of)
            if n not in self._left_out or self._left_out[n].ask_at <= now
        )
        if new:
            self._handshake(new, timeout)
        return dict(self.partition_of)

    def reconfigure(self, run_config_json: str, timeout: float) -> None:
        """Hand every connected node (and every node that joins later) a new run config: a
        second handshake, whose replies only need to arrive."""
        self._config_json = run_config_json
        for reply in self._ask(sorted(self.partition_of), timeout):
            if reply.has_error():
                log.warning(
                    "node %d did not take the completed config: %s",
                    reply.metadata.src_node_id,
                    reply.error.reason,
                )

    def take_handshake_bytes(self) -> tuple[int, int]:
        """(up, down) bytes of handshakes since the last call; counted into the next round."""
        counted = self._bytes_up, self._bytes_down
        self._bytes_up = self._bytes_down = 0
        return counted

    def wait_for(self, count: int, timeout: float) -> dict[int, int]:
        """Block until `count` distinct partitions are connected, or fail after `timeout` s."""
        deadline = time.monotonic() + timeout
        last_report = 0.0
        while True:
            nodes = self.refresh(timeout=max(deadline - time.monotonic(), 1.0))
            have = len(set(nodes.values()))
            if have >= count - len(self.excluded):
                if not nodes:
                    raise RunFailed("every node's data was left out: nothing is left to train")
                return nodes
            online = set(self._grid.get_node_ids())
            failed = [self._failed[n] for n in sorted(online) if n in self._failed]
            refused = {n: self._refused[n] for n in sorted(online) if n in self._refused}
            if refused and (stop := self._too_few_take_it(online, refused, count)):
                raise RunFailed(stop)
            if len(online) >= count and failed and len(failed) == len(online):
                # the app itself is broken (its code, its data loading): waiting won't mend it
                raise RunFailed(
                    f"the ClientApp failed the handshake on all {len(online)} SuperNodes: "
                    f"{failed[0]} ({self._logs})"
                )
            why = f"; {len(failed)} failed the handshake: {failed[0]}" if failed else ""
            if refused:
                why += f"; {len(refused)} refused this run: {_each(refused)}"
            now = time.monotonic()
            if now >= deadline:
                raise TimeoutError(
                    f"only {have} of {count} clients connected after {timeout:.0f} s: the "
                    f"federation has {len(online)} SuperNode{'s' if len(online) != 1 else ''}"
                    + (
                        f"{why} ({self._logs})"
                        if failed
                        else why
                        if refused
                        else f"; set num_clients={len(online)} (or clients_per_round), or "
                        "start more SuperNodes (Flower's simulation: options.num-supernodes)"
                        if len(online) < count
                        else " (check that every SuperNode reaches the SuperLink's Fleet API)"
                    )
                )
            if now - last_report > 10:
                self._say(
                    f"waiting for clients: {have}/{count} connected{why}, "
                    f"{deadline - now:.0f} s left"
                )
                last_report = now
            time.sleep(1.0)

    def _too_few_take_it(self, online: set[int], refused: dict[int, str], count: int) -> str:
        """Why the run cannot start when its sites' refusals leave too few nodes ('' while it
        can): decided once every partition's node is there, as a refusal is for the run."""
        if len(refused) == len(online) and len(online) >= count:
            return f"all {len(online)} SuperNodes refused this run: {_each(refused)}"
        left = len(online) - len(refused)
        if len(online) < self._num_partitions or left >= count - len(self.excluded):
            return ""
        return (
            f"{len(refused)} of {len(online)} SuperNodes refused this run and a round needs "
            f"{count} clients, {left} remain: {_each(refused)}"
        )

    def _handshake(self, node_ids: list[int], timeout: float) -> None:
        holders = {p: n for n, p in self.partition_of.items()}  # a look-up per reply, not a scan
        for reply in self._ask(node_ids, timeout):
            node = reply.metadata.src_node_id
            if reply.has_error() and reply.error.code == ErrorCode.INVALID_FAB:  # its site's
                if self._refused.get(node) != str(reply.error.reason):  # once, not each ask
                    self._say(warning_line(f"node {node} refused this run: {reply.error.reason}"))
                self._refused[node] = str(reply.error.reason)
                self._leave_out(node)
                continue
            if reply.has_error():
                log.warning("node %d failed the handshake: %s", node, reply.error.reason)
                self._leave_out(node)
                if reply.error.code not in LOST:
                    self._failed[node] = _raised(str(reply.error.reason))
                continue
            metrics = reply.content.metric_records[protocol.METRICS]
            pid = int(metrics[protocol.PARTITION_ID])
            if not 0 <= pid < self._num_partitions:
                self._turn_away(
                    node,
                    f"partition-id {pid} is outside 0..{self._num_partitions - 1} "
                    f"(this run has num_clients={self._num_partitions})",
                )
                continue
            started_for = int(metrics.get(protocol.NUM_PARTITIONS, self._num_partitions))
            if started_for != self._num_partitions:  # its partition would be another split's
                self._turn_away(
                    node,
                    f"it was started with num-partitions={started_for}, this run has "
                    f"num_clients={self._num_partitions}",
                )
                continue
            holder = holders.get(pid)
            if holder is not None and self._answers(holder):
                self._turn_away(
                    node,
                    f"partition-id {pid} is already held by live node {holder} "
                    "(each SuperNode needs its own partition-id)",
                )
                continue
            reason = self._vet(pid, reply) if self._vet is not None else None
            if reason is not None:
                self.excluded.add(pid)
                self._turn_away(node, reason)
                continue
            if holder is not None:
                log.warning("partition %d moves from silent node %d to node %d", pid, holder, node)
                del self.partition_of[holder]
            self.partition_of[node] = pid
            holders[pid] = node
            self._left_out.pop(node, None)
            self._failed.pop(node, None)
            self._say_joined(node, pid)
            if self._on_join is not None:
                self._on_join(pid, metrics)

    def _say_joined(self, node: int, pid: int) -> None:
        """One line per join and return: a node id seen before is the same node back (with
        SuperNode authentication a restarted node keeps its id), a new one is a new node."""
        before = self._last_holder.get(pid)
        if self._last_held[node]:
            self._say(f"node {node} returns with partition {pid}")
        elif before is not None:
            self._say(f"node {node} joins as partition {pid} (before: node {before})")
        else:
            self._say(f"node {node} joins as partition {pid}")
        if before is not None:
            self._last_held[before] -= 1
        self._last_holder[pid] = node
        self._last_held[node] += 1

    def _turn_away(self, node: int, reason: str) -> None:
        """Leave the node out of this run and tell it why (its operator sees the reason)."""
        log.error("node %d turned away: %s", node, reason)
        self._leave_out(node)
        notice = Message(
            content=RecordDict({protocol.CONFIG: ConfigRecord({protocol.REASON: reason})}),
            dst_node_id=node,
            message_type=protocol.TURN_AWAY,
        )
        exchange(self._grid, [notice], timeout=NOTICE_SECONDS)

    def _leave_out(self, node: int) -> None:
        """Ask `node` again after a wait that doubles while it is left out each time."""
        before = self._left_out.get(node)
        wait = RETRY_SECONDS if before is None else min(2 * before.wait, RETRY_MAX_SECONDS)
        self._left_out[node] = LeftOut(time.monotonic() + wait, wait)

    def _answers(self, node_id: int) -> bool:
        """Whether a node still replies: a restarted SuperNode's old id lingers until its
        heartbeat expires (about a minute), and must not block the node that replaced it."""
        return any(not r.has_error() for r in self._ask([node_id], PROBE_SECONDS))

    def _ask(self, node_ids: list[int], timeout: float) -> list[Message]:
        # one config record for all: serialized and counted once, not once per node
        config = ConfigRecord({protocol.RUN_CONFIG: self._config_json})
        messages = [
            Message(
                content=RecordDict({protocol.CONFIG: config}),
                dst_node_id=node_id,
                message_type=protocol.HANDSHAKE,
            )
            for node_id in node_ids
        ]
        traffic = exchange(self._grid, messages, timeout=timeout)
        self._bytes_down += traffic.bytes_down
        self._bytes_up += traffic.bytes_up
        return traffic.replies


def _raised(reason: str) -> str:
    """The error a ClientApp raised, from Flower's reason for it: one line, or, from the
    simulation's Ray workers, a whole traceback whose first exception is the one raised."""
    found = re.search(r"^(?:\w+\.)*\w+(?:Error|Exception): .+$", reason, flags=re.M)
    if found:
        return found.group(0)
    first = (reason.strip().splitlines() or [""])[0]
    flower = re.match(r"<class '([\w.]+)'>:<'(.*?)'?>?$", first)  # Flower's "<class 'X'>:<'..."
    return f"{flower.group(1)}: {flower.group(2)}" if flower else first


def _each(refused: dict[int, str]) -> str:
    """Every refusing node with its site's reason, in one line."""
    return "; ".join(f"node {node}: {reason}" for node, reason in refused.items())

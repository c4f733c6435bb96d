"""`compression.down`: the global model sent as compressed broadcasts (EFL spec 2.6, 2.7, 2.9).

The server keeps the model its clients hold, `held` (version v = the rounds it has moved),
and its residual R. After a round, the strategy's new model w becomes the broadcast
b = C(w - held + R) (C the codec; with error feedback R <- w - held + R - b), and
held <- held + b is the new global model: what the server evaluates and what every client
holds, exactly (spec 2.7's recommended form).

A message that carries the global model is sent, per client, as
  - the broadcasts since the version it holds (none if it holds the current one, e.g. after
    FedGSNR's query earlier in the round), keyed by the version each one makes: the client
    applies those past the version it holds, in order, and reaches `held` bit for bit (spec
    2.9 "download catch-up": what makes it correct, counted as sent),
  - the whole model otherwise (first contact, too far behind, or after an error).
The server keeps the newest broadcasts while together they weigh no more than the float
model sent whole (or the last `history` of them), so a catch-up never costs more than
sending the model.
Every such message carries the version (`protocol.MODEL_VERSION`).

`server_apply="full"` is the paper's literal Eq. 6 (spec 2.7), kept to show its flaw: the
server's own model moves by the whole Delta^G = w - held + R, residual included, while the
clients apply C(Delta^G); each residual is then counted twice and the server's model drifts
from the one clients train. Clients still hold `held`; only what the server evaluates differs.
A client holds a version once it has answered a message that brought it there. Integer
tensors (counters) always travel dense. Messages with any other model (a strategy's own
per-client copies) are sent as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

from fl_system.learning.compression import Compression, is_compressed
from fl_system.learning.seeding import derive_seed
from fl_system.messages import protocol

_DOWN_SEED = 0xD0E  # the seed of a stochastic codec's rounding, per round
_PREFIX = "downlink/"
SERVER_APPLY = ("recommended", "full")


class Downlink:
    """The server's side: the held model, its residual, versions and recent broadcasts."""

    def __init__(
        self,
        compression: Compression,
        *,
        seed: int,
        history: int | None = None,
        server_apply: str = "recommended",
    ) -> None:
        if server_apply not in SERVER_APPLY:
            raise ValueError(
                f"compression.server_apply must be one of {', '.join(SERVER_APPLY)}, "
                f"got {server_apply!r}"
            )
        self.compression = compression
        self.full = server_apply == "full"
        self.server_model: dict[str, np.ndarray] | None = None  # server_apply=full only
        self.seed = seed
        self.history = history
        self.held: dict[str, np.ndarray] | None = None  # float tensors, by name
        self.residual: list[np.ndarray] | None = None
        self.version = 0
        self.synced: dict[int, int] = {}  # partition -> the version it holds
        self.broadcasts: dict[int, np.ndarray] = {}  # version v -> the blob that made it
        self._pending: dict[int, tuple[int, int]] = {}  # node -> (partition, version sent)

    def start(self, arrays: ArrayRecord) -> None:
        """Take the initial (or restored) global model as what clients will hold."""
        if self.held is None:
            self.held = {
                k: a.astype(np.float32)
                for k, a in zip(arrays.keys(), arrays.to_numpy_ndarrays(), strict=True)
                if is_compressed(a)
            }
        if self.full and self.server_model is None:
            self.server_model = {k: v.copy() for k, v in self.held.items()}

    # ----- sending -------------------------------------------------------------------------
    def outgoing(
        self,
        messages: Sequence[Message],
        nodes: Mapping[int, int],
        global_arrays: ArrayRecord,
        version: int | None = None,
    ) -> list[Message]:
        """The messages as they travel: the global model replaced per client. `version`: the
        version `global_arrays` is, if an earlier one (an asynchronous task sent again)."""
        version = self.version if version is None else version
        out = []
        for message in messages:
            node = message.metadata.dst_node_id
            content = message.content
            if node not in nodes or content.array_records.get(protocol.ARRAYS) is not global_arrays:
                out.append(message)
                continue
            partition = nodes[node]
            self._pending[node] = (partition, version)
            rewritten = RecordDict()
            for name, record in content.items():
                if name != protocol.ARRAYS:
                    rewritten[name] = record
            arrays, updates = self._model_for(partition, global_arrays, version)
            rewritten[protocol.ARRAYS] = arrays
            config = dict(rewritten.config_records.get(protocol.CONFIG, ConfigRecord()))
            config[protocol.MODEL_VERSION] = version
            if updates is not None:
                rewritten[protocol.DOWN_UPDATES] = updates
            rewritten[protocol.CONFIG] = ConfigRecord(config)
            out.append(
                Message(rewritten, dst_node_id=node, message_type=message.metadata.message_type)
            )
        return out

    def _model_for(
        self, partition: int, arrays: ArrayRecord, version: int
    ) -> tuple[ArrayRecord, ArrayRecord | None]:
        """(ARRAYS, DOWN_UPDATES) for one client: the integer tensors and the broadcasts from
        the version it holds to `version`, keyed by the version each one makes; or the whole
        model, None."""
        held = self.synced.get(partition)
        missing = range((held or 0) + 1, version + 1)
        if held is None or held > version or any(v not in self.broadcasts for v in missing):
            return arrays, None
        dense = ArrayRecord({k: arrays[k] for k in arrays if k not in (self.held or {})})
        return dense, ArrayRecord({str(v): Array(self.broadcasts[v]) for v in missing})

    def confirm(self, replies: Sequence[Message]) -> None:
        """Clients that answered hold the version they were sent; a client that reports a
        mismatch gets the whole model next time."""
        for reply in replies:
            partition, version = self._pending.pop(reply.metadata.src_node_id, (None, None))
            if partition is None:
                continue
            if reply.has_error():
                self.synced.pop(partition, None)
            else:
                self.synced[partition] = version

    def forget_clients(self) -> None:
        """Send every client the whole model next: what it holds is no longer known (an
        asynchronous run resumed while tasks were in flight)."""
        self.synced.clear()
        self._pending.clear()

    # ----- after the round -----------------------------------------------------------------
    def commit(
        self, new_arrays: ArrayRecord, server_round: int, *, keep_pending: bool = False
    ) -> tuple[ArrayRecord, int]:
        """The new global model (held + broadcast) and the broadcast's size in bytes.
        `keep_pending`: messages still out will be confirmed later (asynchronous tasks in
        flight); a round's are all answered or lost by now."""
        assert self.held is not None, "start() comes first"
        names = list(self.held)
        target = dict(zip(new_arrays.keys(), new_arrays.to_numpy_ndarrays(), strict=True))
        delta = [target[k].astype(np.float32) - self.held[k] for k in names]
        rng = np.random.default_rng(derive_seed(self.seed, server_round, _DOWN_SEED))
        carried = self.residual if self.compression.error_feedback else None
        blob, decoded, self.residual = self.compression.encode(delta, carried, rng)
        for i, (k, d) in enumerate(zip(names, decoded, strict=True)):
            self.held[k] = self.held[k] + d
            if self.server_model is not None:  # the literal form: all of Delta^G
                self.server_model[k] = (
                    self.server_model[k] + delta[i] + (carried[i] if carried is not None else 0.0)
                )
        self.version += 1
        self.broadcasts[self.version] = blob
        self._prune()
        if not keep_pending:
            self._pending.clear()
        out = {k: Array(self.held.get(k, v)) for k, v in target.items()}
        return ArrayRecord(out), int(blob.size)

    def evaluated(self, arrays: ArrayRecord) -> ArrayRecord:
        """The model the server evaluates: `arrays` (what clients hold), or under
        server_apply=full its own literal model."""
        if self.server_model is None:
            return arrays
        return ArrayRecord({k: Array(self.server_model.get(k, arrays[k].numpy())) for k in arrays})

    def _prune(self) -> None:
        """Drop the oldest broadcasts beyond `history`, or beyond one whole float model's
        bytes: a client further behind gets the model itself, which is cheaper."""
        if self.history is not None:
            self.broadcasts.pop(self.version - self.history, None)
            return
        budget = 4 * sum(h.size for h in (self.held or {}).values())
        total = sum(b.size for b in self.broadcasts.values())
        for version in sorted(self.broadcasts):
            if total <= budget:
                break
            total -= self.broadcasts.pop(version).size

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        synced = np.array(sorted(self.synced.items()), dtype=np.int64).reshape(-1, 2)
        state = {f"{_PREFIX}version": np.array([self.version]), f"{_PREFIX}synced": synced}
        for i, r in enumerate(self.residual or []):
            state[f"{_PREFIX}residual/{i}"] = r
        for v, blob in self.broadcasts.items():
            state[f"{_PREFIX}broadcast/{v}"] = blob
        for k, w in (self.server_model or {}).items():
            state[f"{_PREFIX}server/{k}"] = w
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray], arrays: ArrayRecord) -> None:
        """Restore with the checkpointed global model, which is `held`."""
        self.held = self.server_model = None
        self.start(arrays)
        head = f"{_PREFIX}server/"
        if self.full and any(k.startswith(head) for k in state):
            self.server_model = {
                k[len(head) :]: np.asarray(v, np.float32)
                for k, v in state.items()
                if k.startswith(head)
            }
        self.version = int(state[f"{_PREFIX}version"][0])
        self.synced = {int(p): int(v) for p, v in state[f"{_PREFIX}synced"]}
        residual = sorted(
            (int(k.rsplit("/", 1)[1]), v)
            for k, v in state.items()
            if k.startswith(f"{_PREFIX}residual/")
        )
        self.residual = [v for _, v in residual] or None
        self.broadcasts = {
            int(k.rsplit("/", 1)[1]): v
            for k, v in state.items()
            if k.startswith(f"{_PREFIX}broadcast/")
        }

    @staticmethod
    def owns(key: str) -> bool:
        return key.startswith(_PREFIX)

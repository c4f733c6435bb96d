"""Per-client evaluation (`client_eval.enabled`; EFL spec 5): how well models do on each
client's own held-out data, every client weighing the same.

Every `eval_every` rounds (and the last):
  - local: the round's train messages carry `protocol.EVAL_LOCAL`; each trainer scores its
    model after its local steps on its local test split and reports it with its update
    (`client_acc_local`, `client_acc_local_worst10`: over the round's trainers);
  - global: after the round, an evaluate message takes the new global model to every
    connected client, which scores it there (`client_acc_global`, `..._worst10`: over all
    clients that answered). Under `compression.down` these messages go through the downlink
    like any other, so they also bring the clients up to date; their bytes are counted apart
    (`client_eval_bytes_down`, `client_eval_bytes_up`), not in the round's training traffic.
The worst decile is the mean of the lowest 10 % (at least one client). `summary.json` gets the
best mean over rounds (BMTA, global and local) and the last one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from omegaconf import DictConfig, OmegaConf

from fl_system import protocol
from fl_system.evaluation import client_accuracy_summary

log = logging.getLogger(__name__)


class ClientEvaluation:
    """Asks for local scores in train messages and runs the global evaluation exchange."""

    def __init__(self, *, eval_every: int, num_rounds: int) -> None:
        self.eval_every = eval_every
        self.num_rounds = num_rounds

    @classmethod
    def from_config(cls, cfg: DictConfig) -> ClientEvaluation | None:
        if not OmegaConf.select(cfg, "client_eval.enabled", default=False):
            return None
        return cls(eval_every=int(cfg.eval_every), num_rounds=int(cfg.num_rounds))

    def due(self, server_round: int) -> bool:
        return server_round % self.eval_every == 0 or server_round == self.num_rounds

    def train_config(self, server_round: int) -> dict[str, bool]:
        """What the round's train messages add to their config."""
        return {protocol.EVAL_LOCAL: True} if self.due(server_round) else {}

    def local_columns(self, replies: Sequence[Message]) -> dict[str, float]:
        """The trainers' scores of their own models, from the round's replies."""
        return _columns("client_acc_local", _scores(replies))

    def messages(
        self, server_round: int, arrays: ArrayRecord, nodes: Mapping[int, int]
    ) -> list[Message]:
        """The global model to every node in `nodes` (node -> partition), to score there."""
        return [
            Message(
                RecordDict(
                    {
                        protocol.ARRAYS: arrays,
                        protocol.CONFIG: ConfigRecord({protocol.SERVER_ROUND: server_round}),
                    }
                ),
                dst_node_id=node,
                message_type=MessageType.EVALUATE,
            )
            for node in sorted(nodes)
        ]

    def global_columns(
        self, server_round: int, replies: Sequence[Message], asked: int
    ) -> dict[str, float]:
        """The scores of the global model that came back from the `asked` clients."""
        scores = _scores(replies)
        if len(scores) < asked:
            log.warning(
                "round %d: %d of %d clients returned a local evaluation of the global model",
                server_round,
                len(scores),
                asked,
            )
        return {**_columns("client_acc_global", scores), "client_eval_clients": len(scores)}


def _scores(replies: Sequence[Message]) -> list[float]:
    """The accuracies in these replies' metrics from clients that had test data."""
    out = []
    for reply in replies:
        if reply.has_error():
            continue
        metrics = reply.content.metric_records.get(protocol.METRICS, {})
        if int(metrics.get(protocol.CLIENT_TEST_EXAMPLES, 0)) > 0:
            out.append(float(metrics[protocol.CLIENT_ACCURACY]))
    return out


def _columns(prefix: str, scores: Sequence[float]) -> dict[str, float]:
    if not scores:
        return {}
    mean, worst = client_accuracy_summary(scores)
    return {prefix: mean, f"{prefix}_worst10": worst}

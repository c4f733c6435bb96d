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

Federated evaluation (`evaluation=federated|both`) rides on the same evaluate exchange: each
client adds the counts of its scoring (`protocol.EVAL_COUNTS`), and the server sums them into
the `fed_*` columns (accuracy, loss, balanced accuracy, macro F1, AUROC), exactly the metrics
of the union of the clients' test data.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from omegaconf import DictConfig, OmegaConf

from fl_system.learning import score
from fl_system.learning.evaluation import client_accuracy_summary, counts_from_record
from fl_system.messages import protocol

log = logging.getLogger(__name__)


class ClientEvaluation:
    """Asks for local scores in train messages and runs the global evaluation exchange."""

    def __init__(
        self,
        *,
        eval_every: int,
        num_rounds: int,
        per_client: bool = True,
        pooled: Sequence[str] = (),
    ) -> None:
        self.eval_every = eval_every
        self.num_rounds = num_rounds
        self.per_client = per_client  # client_eval: per-client accuracies
        self.pooled = tuple(pooled)  # evaluation=federated|both: these metrics, of summed counts

    @classmethod
    def from_config(cls, cfg: DictConfig) -> ClientEvaluation | None:
        per_client = bool(OmegaConf.select(cfg, "client_eval.enabled", default=False))
        federated = score.mode(cfg) != "central"
        if not per_client and not federated:
            return None
        return cls(
            eval_every=int(cfg.eval_every),
            num_rounds=int(cfg.num_rounds),
            per_client=per_client,
            pooled=score.reported(cfg) if federated else (),
        )

    def due(self, server_round: int) -> bool:
        return server_round % self.eval_every == 0 or server_round == self.num_rounds

    def train_config(self, server_round: int) -> dict[str, bool]:
        """What the round's train messages add to their config."""
        return {protocol.EVAL_LOCAL: True} if self.per_client and self.due(server_round) else {}

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
        columns: dict[str, float] = {}
        if self.per_client:
            columns.update(_columns("client_acc_global", scores))
            columns["client_eval_clients"] = len(scores)
        if self.pooled:
            columns.update(self._pooled(replies))
        return columns

    def _pooled(self, replies: Sequence[Message]) -> dict[str, float]:
        """The fed_* columns: the metrics of the counts summed over the clients."""
        counts = [
            counts_from_record(r.content.array_records[protocol.EVAL_COUNTS])
            for r in replies
            if not r.has_error() and protocol.EVAL_COUNTS in r.content.array_records
        ]
        if not counts:
            return {}
        metrics = sum(counts[1:], counts[0]).metrics()
        columns = {f"fed_{k}": metrics[k] for k in self.pooled if k in metrics}
        return {**columns, "fed_examples": metrics["examples"], "fed_clients": len(counts)}


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

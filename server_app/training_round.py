"""One round's training, as Flower's `Strategy.start` runs it: `configure_train`, the training
exchange (in the clear, or as SecAgg+ when `secagg` is on), `aggregate_train` under the DP
policy's noise, and the round's metrics row; for an asynchronous strategy, one server step.
Then the round's evaluation on the clients (`configure_evaluate`, `aggregate_evaluate`).

A round that cannot give a model says why: a failed secure round or replies a DP wrapper
refuses keep the model (the next round runs); too few usable replies end the run."""

from __future__ import annotations

import logging

from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from fl_system.messages import protocol
from fl_system.records import run_log
from server_app.federated.asynchronous import AsynchronousStrategy
from server_app.federated.strategy import FederatedStrategy
from server_app.federation import Federation
from server_app.privacy import Privacy
from server_app.rounds import RoundRecord, RunFailed, grouped_reasons
from server_app.secure_aggregation import SecAggFailed
from server_app.secure_exchange import SecureExchange

log = logging.getLogger(__name__)

Trained = tuple[ArrayRecord, dict, ArrayRecord | None]  # the model, its row, what to score


class TrainingRound:
    """The training of each round of `strategy` over `grid`.

    Parameters
    ----------
    strategy : FederatedStrategy
        The run's strategy (its federation, courier and add-ons).
    privacy : Privacy
        The DP policy: the strategy as Flower's loop calls it, its noise and what it releases.
    secure : SecureExchange | None
        SecAgg+ for the training exchange (None: in the clear).
    grid : Grid
        The run's grid.
    min_clients : int
        Usable replies a round needs, or the run fails.
    """

    def __init__(
        self,
        strategy: FederatedStrategy,
        privacy: Privacy,
        secure: SecureExchange | None,
        grid: Grid,
        min_clients: int,
    ) -> None:
        self.strategy = strategy
        strategy.secure_training = secure is not None  # its configure_train checks it
        assert strategy.federation is not None
        self.federation: Federation = strategy.federation
        self.privacy = privacy
        self.flower = privacy.flower
        self.secure = secure
        self.grid = grid
        self.min_clients = min_clients

    def __call__(
        self, rnd: int, arrays: ArrayRecord, config: ConfigRecord | None = None
    ) -> Trained:
        """The new global model, the metrics row and the model to evaluate; `config` goes
        to `configure_train` (Flower's `train_config`)."""
        if isinstance(self.strategy, AsynchronousStrategy):  # a round is one server step
            arrays, row = self.strategy.async_step(self.grid, arrays)
            up, down = self.federation.take_handshake_bytes()
            row["bytes_up"] += up
            row["bytes_down"] += down
            return arrays, {"round": rnd, **row}, None
        courier = self.federation.courier
        if self.secure is not None:
            self._secure_sums()
        messages = self.flower.configure_train(rnd, arrays, config or ConfigRecord(), self.grid)
        if self.secure is None:
            replies = courier.send(self.grid, messages, "train").replies
        else:
            weigh, summed = self.strategy.weights_before_training, self.strategy.summed_up
            replies, failed = self.secure.send(courier, self.grid, messages, weigh, summed)
            if failed is not None:  # the model stays; the next round runs
                log.warning("round %d: secure aggregation failed: %s; the model stays", rnd, failed)
                return arrays, {"round": rnd, "participants": 0, "failures": len(messages)}, None
        with self.privacy.noise(rnd):
            released, _ = self.flower.aggregate_train(rnd, replies)
        record = self.strategy.last_round
        if record is None or record.plan.round != rnd:  # a DP wrapper refused the replies
            failed = sum(r.has_error() for r in replies)
            log.warning(
                "round %d: %d of %d replies were errors and Flower's DP wrapper aggregates "
                "no round with an error: the model stays",
                rnd,
                failed,
                len(replies),
            )
            return arrays, {"round": rnd, "participants": 0, "failures": failed}, None
        if record.idle:
            failed = len(record.result.failures)
            row = {"round": rnd, "participants": 0, "failures": failed, **record.result.metrics}
            return arrays, row, None
        result = record.result
        if released is None or result.participants < self.min_clients:
            reasons = grouped_reasons(result.failures)
            raise RunFailed(
                f"round {rnd}: {result.participants} usable replies of {record.chosen} sent"
                + (f", {courier.timed_out} timed out" if courier.timed_out else "")
                + (f" ({reasons})" if reasons else "")
            )
        publish, privacy_columns = self.privacy.release(record)
        row = {**round_row(self.federation, rnd, record), **privacy_columns}
        if self.secure is not None:
            row.update(self.secure.columns)
        if not publish:
            return arrays, row, None
        return released, row, result.scored

    def evaluate_on_clients(
        self, rnd: int, arrays: ArrayRecord, config: ConfigRecord | None = None
    ) -> dict:
        """client_eval: the global model scored on every connected client's test split (its
        columns and bytes; none when it is not due)."""
        messages = self.flower.configure_evaluate(rnd, arrays, config or ConfigRecord(), self.grid)
        if not messages:
            return {}
        traffic = self.federation.courier.send(
            self.grid, messages, "client_eval", timeout=self.federation.cfg.round_timeout
        )
        columns = self.flower.aggregate_evaluate(rnd, traffic.replies) or {}
        return {
            **columns,
            "client_eval_bytes_down": traffic.bytes_down,
            "client_eval_bytes_up": traffic.bytes_up,
        }

    def _secure_sums(self) -> None:
        """The sums an add-on needs only in total (FedDisco's label counts with
        target=global), run as SecAgg+ over every connected node before the first round that
        needs them; a sum that cannot finish ends the run (the add-on cannot do without)."""
        assert self.secure is not None
        for addon in self.strategy.addons:
            name = addon.secure_sum()
            if name is None:
                continue
            timeout = float(self.federation.cfg.round_timeout)
            nodes = self.federation.connect(self.grid).refresh(timeout)
            asked = ConfigRecord({protocol.SECURE_SUM: name})
            messages = [
                Message(RecordDict({protocol.CONFIG: asked}), n, MessageType.TRAIN) for n in nodes
            ]
            try:
                total, clients = self.secure.sum(self.federation.courier, self.grid, messages)
            except SecAggFailed as failed:
                raise RunFailed(
                    f"the secure sum of {addon.name}'s {name} failed: {failed}"
                ) from None
            addon.take_secure_sum(total)
            run_log.say(f"{addon.name}: {name} of {clients} clients summed securely")


def round_row(federation: Federation, rnd: int, record: RoundRecord) -> dict:
    """The round's metrics.csv row: who took part, what moved, the strategy's columns."""
    courier = federation.courier
    tallies = courier.tallies
    handshake_up, handshake_down = federation.take_handshake_bytes()
    row: dict = {
        "round": rnd,
        "participants": record.result.participants,
        "failures": len(record.result.failures) + courier.timed_out,
        "bytes_up": sum(t.bytes_up for t in tallies.values()) + handshake_up,
        "bytes_down": sum(t.bytes_down for t in tallies.values()) + handshake_down,
    }
    if federation.compression is not None:  # what the encoded updates weighed
        row["update_bytes_up"] = record.updates.update_bytes
        row["update_bits_naive"] = round(record.updates.bits_naive)
        row["update_bits_golomb"] = round(record.updates.bits_golomb)
    if len(tallies) > 1:  # several exchanges: each one's traffic and time
        for label, t in tallies.items():
            row[f"bytes_up_{label}"] = t.bytes_up
            row[f"bytes_down_{label}"] = t.bytes_down
            row[f"seconds_{label}"] = round(t.seconds, 3)
    row.update(record.broadcast)
    client_eval = federation.client_eval
    if client_eval is not None and client_eval.due(rnd):
        row.update(client_eval.local_columns(record.replies))
    row.update({k: v for k, v in record.result.metrics.items() if not isinstance(v, list)})
    return row

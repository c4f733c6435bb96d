"""`Strategy.start` under `secagg=secaggplus`, in a Flower app of one's own: Flower's rounds,
each round's training run as fl-run's driver runs it (`TrainingRound`: the strategy's
`configure_train`, the exchange as SecAgg+ through `SecureExchange`, `aggregate_train` under
the DP policy), and Flower's `Result`.

Flower's own loop sends the training messages with `grid.send_and_receive` and hands their
replies, each client's model, to the strategy: every update in the clear. Here the server
sends only the protocol's stages, the evaluation on the clients (metrics) and the strategy's
own queries, and learns the weighted average. `evaluate_fn` scores the global model before
the first round and after each, as in Flower's loop.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from logging import INFO

from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result

from fl_system.privacy.secagg import SecAggSettings
from server_app.federated.strategy import FederatedStrategy, numeric_metrics
from server_app.privacy import Privacy
from server_app.secure_exchange import SecureExchange
from server_app.training_round import TrainingRound

EvaluateFn = Callable[[int, ArrayRecord], MetricRecord | None]


def secure_start(
    strategy: FederatedStrategy,
    settings: SecAggSettings,
    grid: Grid,
    initial_arrays: ArrayRecord,
    num_rounds: int,
    timeout: float,
    train_config: ConfigRecord | None,
    evaluate_config: ConfigRecord | None,
    evaluate_fn: EvaluateFn | None,
) -> Result:
    """`num_rounds` rounds of `strategy` over `grid` (Flower's `Strategy.start` arguments),
    their training as SecAgg+.

    Each stage of the protocol waits `secagg.timeout` seconds, else Flower's `timeout`; a
    round whose protocol fails keeps the model (the next one runs), too few usable replies
    end the run (RunFailed), as in fl-run. `train_metrics_clientapp` holds each round's
    metrics row (participants, bytes, `secagg_summed`, `secagg_dropped`,
    `secagg_error_bound`, ...), `evaluate_metrics_clientapp` the clients' evaluation when
    `client_eval` is due."""
    cfg = strategy.experiment
    if settings.timeout is None:
        settings = dataclasses.replace(settings, timeout=timeout)
    privacy = Privacy(strategy, cfg)  # the client-side DP modes' wrapper, if one is on
    training = TrainingRound(
        strategy, privacy, SecureExchange(settings), grid, min_clients=int(cfg.min_clients or 1)
    )
    log(INFO, "Starting %s strategy, its training as SecAgg+:", type(strategy).__name__)
    privacy.flower.summary()
    result = Result()
    started = time.time()
    _evaluate(result, evaluate_fn, 0, initial_arrays)
    arrays = initial_arrays
    for rnd in range(1, num_rounds + 1):
        log(INFO, "[ROUND %s/%s]", rnd, num_rounds)
        arrays, row, _ = training(rnd, arrays, train_config)
        result.arrays = arrays
        metrics = result.train_metrics_clientapp[rnd] = numeric_metrics(privacy.published_row(row))
        log(INFO, "\t└──> Aggregated MetricRecord: %s", metrics)
        evaluated = training.evaluate_on_clients(rnd, arrays, evaluate_config)
        if evaluated:
            result.evaluate_metrics_clientapp[rnd] = numeric_metrics(evaluated)
        _evaluate(result, evaluate_fn, rnd, arrays)
    log(INFO, "Strategy execution finished in %.2fs", time.time() - started)
    return result


def _evaluate(
    result: Result, evaluate_fn: EvaluateFn | None, rnd: int, arrays: ArrayRecord
) -> None:
    """Central evaluation of round `rnd`'s model, kept in `result` as Flower's loop keeps it."""
    if evaluate_fn is None:
        return
    metrics = evaluate_fn(rnd, arrays)
    log(INFO, "\t└──> Global evaluation, round %s: %s", rnd, metrics)
    if metrics is not None:
        result.evaluate_metrics_serverapp[rnd] = metrics

"""The ClientApp: learns the experiment at the handshake, then trains on its own partition.

A client knows only who it is (node config: partition-id, num-partitions, optional data-dir,
device, cache-dir and state-dir). Everything else arrives from the server: the config at
the handshake (kept in `context.state`), the global model and round number with every train
message, and settings of its own (`train.*` overrides) when the strategy sends them. The local
rule and the enabled add-ons' client halves add metrics and answer queries through their
hooks (`client_app.addons.ClientHooks`).

`app` builds the model and reads the data from the experiment; `make_client_app` gives a
Flower app of one's own the same ClientApp on its own data loading and model.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from logging import ERROR

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MetricRecord,
    RecordDict,
)
from flwr.clientapp import ClientApp
from flwr.common.logger import log as flwr_log
from torch import nn

from client_app.addons import ClientHooks, LocalData
from client_app.algorithms.base import LocalRule
from client_app.compression import compress_model
from client_app.handshake import handshake_reply
from client_app.hostile import (
    freeloader_reply,
    is_freeloader,
    is_malicious,
    slow_down,
    tampered_reply,
)
from client_app.incoming import (
    STATE,
    Incoming,
    compression_for,
    model_for,
    open_message,
    run_config,
)
from client_app.local_data import (
    NodeIdentity,
    training_moments,
)
from client_app.secure_aggregation import is_secure, secure_train
from client_app.sources import CONFIGURED, LoadData, Sources, own_sources
from client_app.trainer import TrainSettings, train_locally
from fl_system import privacy
from fl_system.config.experiment import build_client_addons
from fl_system.learning import score
from fl_system.learning.devices import resolve_device
from fl_system.learning.evaluation import Counts, counts_for, counts_record
from fl_system.learning.model_parts import forward_parts
from fl_system.learning.seeding import derive_seed
from fl_system.messages import protocol, wire
from fl_system.privacy import noise
from fl_system.settings.config_nodes import build, config_from_json

_QUERY_SEED = 0x9A5  # separates the seeds of queries from those of training
_UPDATE_SEED = 0xC0DE  # and those of a stochastic codec's rounding


@functools.lru_cache(maxsize=2)
def _rule_factory(config_json: str) -> Callable[[], LocalRule]:
    """The run's local rule class with its settings bound; every message gets a fresh rule.

    Hydra's instantiate costs more per message than the small partitions' epochs can hide.
    """
    return build(config_from_json(config_json).algorithm.local_rule, _partial_=True)


@functools.lru_cache(maxsize=2)
def _addons(config_json: str) -> tuple[ClientHooks, ...]:
    """The enabled add-ons' client halves (stateless between messages)."""
    return tuple(build_client_addons(config_from_json(config_json)))


def _hooks(config_json: str, rule: LocalRule | None = None) -> tuple[ClientHooks, ...]:
    return (rule or _rule_factory(config_json)(), *_addons(config_json))


def make_client_app(
    *, load_data: LoadData | None = None, build_model: Callable[[], nn.Module] | None = None
) -> ClientApp:
    """A ClientApp that runs fl_system's client rules on one's own data and model.

    Parameters
    ----------
    load_data : Optional[Callable[[int, int], tuple]] (default: the experiment's data)
        `load_data(partition_id, num_partitions) -> (train, test)`, called once per node
        process: each part (x, y) arrays or tensors, a torch Dataset or a DataLoader of
        (x, y); test may be None. The node's `partition-id` and `num-partitions` come from
        its node config (Flower's simulation sets them).
    build_model : Optional[Callable[[], torch.nn.Module]] (default: the experiment's model)
        Builds the model (a class works); every node must build the same one (the server
        compares them at the handshake). Its forward returns logits.

    Returns
    -------
    ClientApp
        Flower's ClientApp, which learns the algorithm and its settings from the strategy
        at the handshake (a strategy of `server_app.strategies`).
    """
    return _client_app(own_sources(load_data, build_model))


def _client_app(sources: Sources) -> ClientApp:
    app = ClientApp()

    @app.query(protocol.TURN_AWAY_ACTION)
    def turned_away(msg: Message, context: Context) -> Message:
        return _turned_away(msg)

    @app.query(protocol.HANDSHAKE_ACTION)
    def handshake(msg: Message, context: Context) -> Message:
        return _handshake(msg, context, sources)

    @app.query(protocol.STATS_ACTION)
    def statistics(msg: Message, context: Context) -> Message:
        return _statistics(msg, context)

    @app.query(protocol.ASK_ACTION)
    def ask(msg: Message, context: Context) -> Message:
        return _ask(open_message(msg, context, sources), msg)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        if is_secure(msg):  # secagg=secaggplus: every stage goes through Flower's mod
            return secure_train(
                msg,
                context,
                functools.partial(_train_through_mods, sources=sources),
                functools.partial(_weighing, sources=sources),
                functools.partial(_summand, sources=sources),
            )
        return _train_through_mods(msg, context, sources)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        return _evaluate_locally(open_message(msg, context, sources), msg)

    return app


def _turned_away(msg: Message) -> Message:
    reason = str(msg.content.config_records[protocol.CONFIG][protocol.REASON])
    flwr_log(ERROR, "%s %s", protocol.TURNED_AWAY_LOG, reason)
    return Message(RecordDict(), reply_to=msg)


def _handshake(msg: Message, context: Context, sources: Sources) -> Message:
    config_json = str(msg.content.config_records[protocol.CONFIG][protocol.RUN_CONFIG])
    context.state[STATE] = ConfigRecord({protocol.RUN_CONFIG: config_json})
    node = NodeIdentity.from_context(context)
    cfg = config_from_json(config_json)
    if sources.load_at_handshake:
        sources.training(cfg, node)
    content = handshake_reply(
        cfg,
        node,
        lambda: model_for(sources, config_json),
        lambda: _hooks(config_json),
        lambda: sources.training(cfg, node, normalise=False),  # before federated moments
    )
    return Message(content, reply_to=msg)


def _statistics(msg: Message, context: Context) -> Message:
    """dataset.normalize=federated: the moments of the records this node trains on (count,
    sum and centred sum of squares per channel or numeric feature; no record)."""
    cfg = config_from_json(run_config(context))
    moments = training_moments(cfg, NodeIdentity.from_context(context))
    record = ArrayRecord({k: Array(v) for k, v in moments.items()})
    return Message(RecordDict({protocol.STATS_RECORD: record}), reply_to=msg)


def _ask(got: Incoming, msg: Message) -> Message:
    """A query within a round: the hook whose `question` matches answers it."""
    question = str(got.config[protocol.QUESTION])
    hook = next((h for h in _hooks(got.config_json) if h.question == question), None)
    if hook is None:
        raise ValueError(f"this run's client answers no query '{question}'")
    content = hook.answer(
        got.model,
        got.data,
        got.received,
        seed=derive_seed(got.cfg.seed, got.server_round, got.node.partition_id, _QUERY_SEED),
        device=resolve_device(got.node.device),
    )
    identity = {
        protocol.PARTITION_ID: got.node.partition_id,
        protocol.NUM_EXAMPLES: len(got.data[1]),
    }
    content[protocol.METRICS] = MetricRecord(
        {**identity, **content.metric_records.get(protocol.METRICS, {})}
    )
    return _reply(content, msg)


def _weighing(msg: Message, context: Context, sources: Sources) -> MetricRecord:
    """What the server weighs this client by before it trains (SecAgg+'s setup): its
    examples and the hooks' weighing metrics, against the round's config the setup carries."""
    config_json, node, data = _node_training(context, sources)
    config = msg.content.config_records[protocol.CONFIG]
    metrics = MetricRecord(
        {protocol.PARTITION_ID: node.partition_id, protocol.NUM_EXAMPLES: len(data[1])}
    )
    for hook in _hooks(config_json):
        metrics.update(hook.weighing_metrics(data, config))
    return metrics


def _summand(msg: Message, context: Context, sources: Sources) -> np.ndarray:
    """This client's term of the secure sum the message names (the add-on's that sums it)."""
    config_json, _, data = _node_training(context, sources)
    name = str(msg.content.config_records[protocol.CONFIG][protocol.SECURE_SUM])
    hook = next((h for h in _addons(config_json) if h.summed == name), None)
    if hook is None:
        raise ValueError(f"this run's client contributes to no secure sum '{name}'")
    return hook.summand(data)


def _node_training(context: Context, sources: Sources) -> tuple[str, NodeIdentity, LocalData]:
    """The run's config, this node, and its training data (read once, then cached)."""
    config_json = run_config(context)
    node = NodeIdentity.from_context(context)
    return config_json, node, sources.training(config_from_json(config_json), node)


@functools.lru_cache(maxsize=2)
def _privacy_mod(config_json: str) -> Callable[[Message, Context, Callable], Message] | None:
    """The run's client-side DP mod (`privacy.client`: Flower's fixedclipping_mod,
    adaptiveclipping_mod or LocalDpMod), or None; its noise drawn from OS entropy."""
    node = config_from_json(config_json).get("privacy", {}).get("client")
    if node is None:
        return None
    privacy.install()
    return build(node, label="privacy")


def _train_through_mods(msg: Message, context: Context, sources: Sources) -> Message:
    """Local training, through the run's DP mod when it has one (it clips, or adds noise to,
    the reply's update on this machine)."""
    config_json = run_config(context)
    mod = _privacy_mod(config_json)
    train = functools.partial(_train, sources=sources)
    if mod is None:
        return train(msg, context)
    cfg = config_from_json(config_json)
    if not cfg.privacy.get("reproducible_noise"):
        return mod(msg, context, train)
    server_round = int(msg.content.config_records[protocol.CONFIG][protocol.SERVER_ROUND])
    partition_id = NodeIdentity.from_context(context).partition_id
    with noise.reproducible(cfg.seed, server_round, partition_id):  # debugging only
        return mod(msg, context, train)


def _train(msg: Message, context: Context, sources: Sources) -> Message:
    got = open_message(msg, context, sources)
    cfg, node = got.cfg, got.node
    metrics, extras = freeloader_reply(got) if is_freeloader(got) else _train_locally(got)
    slow_down(got, int(metrics[protocol.NUM_STEPS]))
    compression = compression_for(got.config_json)
    if is_malicious(got):
        content = tampered_reply(got, metrics)
    elif compression is None:
        content = RecordDict(
            {protocol.ARRAYS: ArrayRecord(got.model.state_dict()), protocol.METRICS: metrics}
        )
    else:
        rng = np.random.default_rng(
            derive_seed(cfg.seed, got.server_round, node.partition_id, _UPDATE_SEED)
        )
        end = {k: v.numpy() for k, v in got.model.state_dict().items()}
        received = got.received.array_records[protocol.ARRAYS]
        dense, update = compress_model(compression, received, end, got.state, rng)
        content = RecordDict({protocol.UPDATE: update, protocol.METRICS: metrics})
        if len(dense):  # an empty record would still cost its own object and a reference
            content[protocol.ARRAYS] = dense
    for name, record in extras.items():
        content[name] = record
    return _reply(content, msg)


def _train_locally(got: Incoming) -> tuple[MetricRecord, RecordDict]:
    """Local training with the run's rule: the reply's metrics and the rule's extra records."""
    cfg, node = got.cfg, got.node
    rule = _rule_factory(got.config_json)()
    scoring = bool(got.config.get(protocol.EVAL_LOCAL, False))
    test = got.sources.test(cfg, node) if scoring else None
    result = train_locally(
        got.model,
        *got.data,
        rule,
        TrainSettings.for_message(cfg.train, got.config),
        seed=derive_seed(cfg.seed, got.server_round, node.partition_id),
        device=resolve_device(node.device),
        received=got.received,
        state=got.state,
        evaluate_on=test,
        augment=build(cfg.dataset.augment) if cfg.dataset.get("augment") else None,
        regression=score.regression(cfg),
        parts=forward_parts(cfg.model.get("feature_layer")),
    )
    metrics = MetricRecord(
        {
            protocol.PARTITION_ID: node.partition_id,
            protocol.NUM_EXAMPLES: result.num_examples,
            protocol.TRAIN_LOSS: result.mean_loss,
            protocol.NUM_STEPS: result.steps,
            protocol.COMPUTE_SECONDS: result.seconds,
        }
    )
    if test is not None:
        metrics.update(_scores(result.local_eval, len(test[1])))
    for hook in _hooks(got.config_json, rule):
        metrics.update(hook.reply_metrics(got.data, got.config))
    return metrics, result.extras


def _evaluate_locally(got: Incoming, msg: Message) -> Message:
    """The received global model scored on this client's local test split: its accuracy
    (per-client evaluation, client_eval.enabled) and, under evaluation=federated|both, the
    counts the server sums (confusion matrix, loss sum, score histograms; no records)."""
    x, y = got.sources.test(got.cfg, got.node)
    content = RecordDict()
    scored = None
    if len(y):
        counts = counts_for(got.cfg, got.model, x, y, device=resolve_device(got.node.device))
        if isinstance(counts, Counts):  # per-client accuracy: classification only
            scored = float(np.trace(counts.confusion)) / len(y), counts.loss_sum / len(y)
        if score.mode(got.cfg) != "central":
            content[protocol.EVAL_COUNTS] = counts_record(counts)
    metrics = MetricRecord(
        {protocol.PARTITION_ID: got.node.partition_id, **_scores(scored, len(y))}
    )
    content[protocol.METRICS] = metrics
    return _reply(content, msg)


def _reply(content: RecordDict, msg: Message) -> Message:
    """The reply in the format the request came in: packed for fl_system's exchange, plain
    for Flower's own loop and mods (`fl_system.messages.wire`)."""
    return Message(wire.pack(content) if wire.is_packed(msg.content) else content, reply_to=msg)


def _scores(scored: tuple[float, float] | None, examples: int) -> dict[str, float | int]:
    accuracy, loss = scored if scored is not None else (0.0, 0.0)
    return {
        protocol.CLIENT_ACCURACY: float(accuracy),
        protocol.CLIENT_LOSS: float(loss),
        protocol.CLIENT_TEST_EXAMPLES: examples if scored is not None else 0,
    }


app = _client_app(CONFIGURED)  # fl_system's own: the experiment's data and model

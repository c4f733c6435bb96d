"""The ClientApp: learns the experiment at the handshake, then trains on its own partition.

A client knows only who it is (node config: partition-id, num-partitions, optional data-dir,
device, cache-dir and state-dir). Everything else arrives from the server: the config at
the handshake (kept in `context.state`), the global model and round number with every train
message, and settings of its own (`train.*` overrides) when the strategy sends them. The local
rule and the enabled add-ons' client halves add metrics and answer queries through their
hooks (`client_app.addons.ClientHooks`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from logging import ERROR

import numpy as np
import torch
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
from omegaconf import DictConfig, OmegaConf
from torch import nn

from client_app.addons import ClientHooks
from client_app.algorithms.base import LocalRule
from client_app.compression import compress_model, receive_model
from client_app.handshake import handshake_reply
from client_app.local_data import (
    NodeIdentity,
    local_test_data,
    local_training_data,
    training_moments,
)
from client_app.state import ClientState
from client_app.trainer import TrainSettings, batches, train_locally
from fl_system import privacy, protocol, score, wire
from fl_system.compression import Compression
from fl_system.config_nodes import build, config_from_json
from fl_system.devices import apply_thread_limit, resolve_device
from fl_system.evaluation import Counts, counts_for, counts_record
from fl_system.experiment import build_client_addons, build_compression, build_model
from fl_system.freeloaders import freeload
from fl_system.malicious import tamper
from fl_system.model_parts import forward_parts
from fl_system.privacy import noise
from fl_system.seeding import derive_seed

_STATE = "fl-system"  # context.state record holding what the handshake delivered
_QUERY_SEED = 0x9A5  # separates the seeds of queries from those of training
_UPDATE_SEED = 0xC0DE  # and those of a stochastic codec's rounding
_FREELOADER_SEED = 0xF4EE  # a noise freeloader's draws
_FREELOADER_STATE = "freeloader-last-global"  # ClientState: the global model received last

app = ClientApp()


@functools.lru_cache(maxsize=2)
def _model_for(config_json: str) -> nn.Module:
    """One model object per process and run; each message overwrites all of its weights.

    A simulated client process serves many messages, and rebuilding the model for each one
    costs more than training it on a small partition.
    """
    return build_model(config_from_json(config_json))


@functools.lru_cache(maxsize=2)
def _rule_factory(config_json: str) -> Callable[[], LocalRule]:
    """The run's local rule class with its settings bound; every message gets a fresh rule.

    Hydra's instantiate costs more per message than the small partitions' epochs can hide.
    """
    return build(config_from_json(config_json).algorithm.local_rule, _partial_=True)


@functools.lru_cache(maxsize=4)
def _compression(config_json: str, direction: str = "up") -> Compression | None:
    """How this run's models travel that way (None: as they are)."""
    return build_compression(config_from_json(config_json), direction)


@functools.lru_cache(maxsize=2)
def _addons(config_json: str) -> tuple[ClientHooks, ...]:
    """The enabled add-ons' client halves (stateless between messages)."""
    return tuple(build_client_addons(config_from_json(config_json)))


def _hooks(config_json: str, rule: LocalRule | None = None) -> tuple[ClientHooks, ...]:
    return (rule or _rule_factory(config_json)(), *_addons(config_json))


def _run_config(context: Context) -> str:
    if _STATE not in context.state.config_records:
        raise RuntimeError("message before the handshake: this node has no run config")
    return str(context.state.config_records[_STATE][protocol.RUN_CONFIG])


@app.query(protocol.TURN_AWAY_ACTION)
def turned_away(msg: Message, context: Context) -> Message:
    reason = str(msg.content.config_records[protocol.CONFIG][protocol.REASON])
    flwr_log(ERROR, "%s %s", protocol.TURNED_AWAY_LOG, reason)
    return Message(RecordDict(), reply_to=msg)


@app.query(protocol.HANDSHAKE_ACTION)
def handshake(msg: Message, context: Context) -> Message:
    config_json = str(msg.content.config_records[protocol.CONFIG][protocol.RUN_CONFIG])
    context.state[_STATE] = ConfigRecord({protocol.RUN_CONFIG: config_json})
    node = NodeIdentity.from_context(context)
    content = handshake_reply(
        config_from_json(config_json),
        node,
        lambda: _model_for(config_json),
        lambda: _hooks(config_json),
    )
    return Message(content, reply_to=msg)


@app.query(protocol.STATS_ACTION)
def statistics(msg: Message, context: Context) -> Message:
    """dataset.normalize=federated: the moments of the records this node trains on (count,
    sum and centred sum of squares per channel or numeric feature; no record)."""
    cfg = config_from_json(_run_config(context))
    moments = training_moments(cfg, NodeIdentity.from_context(context))
    record = ArrayRecord({k: Array(v) for k, v in moments.items()})
    return Message(RecordDict({protocol.STATS_RECORD: record}), reply_to=msg)


@dataclass(frozen=True)
class _Incoming:
    """A round's message, opened: the run, this node, the content and the loaded model."""

    config_json: str
    cfg: DictConfig
    node: NodeIdentity
    received: RecordDict
    config: ConfigRecord
    server_round: int
    model: nn.Module
    state: ClientState

    @functools.cached_property
    def data(self) -> tuple[np.ndarray, np.ndarray]:
        """The node's training data, read when first used: an evaluate message needs none
        (a node holding its own data would normalise all of it for nothing)."""
        return local_training_data(self.cfg, self.node)


def _open(msg: Message, context: Context) -> _Incoming:
    config_json = _run_config(context)
    cfg = config_from_json(config_json)
    node = NodeIdentity.from_context(context)
    apply_thread_limit()
    content = wire.unpack(msg.content)
    server_round = int(content.config_records[protocol.CONFIG][protocol.SERVER_ROUND])
    state = ClientState(
        context.state, node.state_root(), cfg.run_id, node.partition_id, server_round
    )
    model = _model_for(config_json)
    received = receive_model(
        _compression(config_json, "down"), content, state, list(model.state_dict())
    )
    config = received.config_records[protocol.CONFIG]
    model.load_state_dict(received.array_records[protocol.ARRAYS].to_torch_state_dict())
    return _Incoming(
        config_json,
        cfg,
        node,
        received,
        config,
        server_round,
        model,
        state,
    )


@app.query(protocol.ASK_ACTION)
def ask(msg: Message, context: Context) -> Message:
    """A query within a round: the hook whose `question` matches answers it."""
    got = _open(msg, context)
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


@functools.lru_cache(maxsize=2)
def _privacy_mod(config_json: str) -> Callable[[Message, Context, Callable], Message] | None:
    """The run's client-side DP mod (`privacy.client`: Flower's fixedclipping_mod,
    adaptiveclipping_mod or LocalDpMod), or None; its noise drawn from OS entropy."""
    node = config_from_json(config_json).get("privacy", {}).get("client")
    if node is None:
        return None
    privacy.install()
    return build(node, label="privacy")


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Local training, through the run's DP mod when it has one (it clips, or adds noise to,
    the reply's update on this machine)."""
    config_json = _run_config(context)
    mod = _privacy_mod(config_json)
    if mod is None:
        return _train(msg, context)
    cfg = config_from_json(config_json)
    if not cfg.privacy.get("reproducible_noise"):
        return mod(msg, context, _train)
    server_round = int(msg.content.config_records[protocol.CONFIG][protocol.SERVER_ROUND])
    partition_id = NodeIdentity.from_context(context).partition_id
    with noise.reproducible(cfg.seed, server_round, partition_id):  # debugging only
        return mod(msg, context, _train)


def _train(msg: Message, context: Context) -> Message:
    got = _open(msg, context)
    cfg, node = got.cfg, got.node
    freeloading = node.partition_id in OmegaConf.select(cfg, "clients.freeloaders.ids", default=[])
    metrics, extras = _freeload(got) if freeloading else _train_locally(got)
    compression = _compression(got.config_json)
    if node.partition_id in OmegaConf.select(cfg, "clients.malicious.ids", default=[]):
        content = _tampered(got, metrics)
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


def _train_locally(got: _Incoming) -> tuple[MetricRecord, RecordDict]:
    """Local training with the run's rule: the reply's metrics and the rule's extra records."""
    cfg, node = got.cfg, got.node
    rule = _rule_factory(got.config_json)()
    scoring = bool(got.config.get(protocol.EVAL_LOCAL, False))
    test = local_test_data(cfg, node) if scoring else None
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


def _freeload(got: _Incoming) -> tuple[MetricRecord, RecordDict]:
    """clients.freeloaders: no training; the model of the configured kind goes back with the
    metrics an honest client would send (its data size and step count, no loss)."""
    cfg, node = got.cfg, got.node
    received = {k: v.numpy() for k, v in got.model.state_dict().items()}
    previous = got.state.load(_FREELOADER_STATE)
    rng = np.random.default_rng(
        derive_seed(cfg.seed, got.server_round, node.partition_id, _FREELOADER_SEED)
    )
    reply = freeload(
        str(cfg.clients.freeloaders.kind),
        received,
        None if previous is None else {k: previous[k].numpy() for k in previous},
        rng,
    )
    got.state.save(_FREELOADER_STATE, ArrayRecord(got.model.state_dict()))
    got.model.load_state_dict({k: torch.as_tensor(v) for k, v in reply.items()})
    settings = TrainSettings.for_message(cfg.train, got.config)
    n = len(got.data[1])
    steps = sum(1 for _ in batches(n, settings, torch.Generator()))  # what it claims
    metrics = MetricRecord(
        {
            protocol.PARTITION_ID: node.partition_id,
            protocol.NUM_EXAMPLES: n,
            protocol.NUM_STEPS: steps,
            protocol.COMPUTE_SECONDS: 0.0,
        }
    )
    return metrics, RecordDict()


def _tampered(got: _Incoming, metrics: MetricRecord) -> RecordDict:
    """clients.malicious: the reply of the configured kind in place of the trained model (sent
    uncompressed: validation allows malicious clients only with compression.up=none)."""
    settings = got.cfg.clients.malicious
    received = got.received.array_records[protocol.ARRAYS]
    layers, claimed = tamper(
        str(settings.kind),
        {k: v.numpy() for k, v in got.model.state_dict().items()},
        {k: received[k].numpy() for k in received},
        int(metrics[protocol.NUM_EXAMPLES]),
        scale=float(settings.scale),
    )
    metrics[protocol.NUM_EXAMPLES] = claimed
    arrays = ArrayRecord({k: Array(v) for k, v in layers.items()})
    return RecordDict({protocol.ARRAYS: arrays, protocol.METRICS: metrics})


@app.evaluate()
def evaluate_locally(msg: Message, context: Context) -> Message:
    """The received global model scored on this client's local test split: its accuracy
    (per-client evaluation, client_eval.enabled) and, under evaluation=federated|both, the
    counts the server sums (confusion matrix, loss sum, score histograms; no records)."""
    got = _open(msg, context)
    x, y = local_test_data(got.cfg, got.node)
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
    for Flower's own loop and mods (`fl_system.wire`)."""
    return Message(wire.pack(content) if wire.is_packed(msg.content) else content, reply_to=msg)


def _scores(scored: tuple[float, float] | None, examples: int) -> dict[str, float | int]:
    accuracy, loss = scored if scored is not None else (0.0, 0.0)
    return {
        protocol.CLIENT_ACCURACY: float(accuracy),
        protocol.CLIENT_LOSS: float(loss),
        protocol.CLIENT_TEST_EXAMPLES: examples if scored is not None else 0,
    }

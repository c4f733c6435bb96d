"""The ClientApp: learns the experiment at the handshake, then trains on its own partition.

A client knows only who it is (node config: partition-id, num-partitions, optional data-dir,
device, cache-dir and state-dir). Everything else arrives from the server: the config at
the handshake (kept in `context.state`), the global model and round number with every train
message.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from logging import ERROR

from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.logger import log as flwr_log
from omegaconf import OmegaConf
from torch import nn

from client_app.algorithms import feddisco
from client_app.algorithms.base import LocalRule
from client_app.local_data import NodeIdentity, local_training_data
from client_app.state import ClientState
from client_app.trainer import TrainSettings, train_locally
from fl_system import protocol, wire
from fl_system.devices import apply_thread_limit, resolve_device
from fl_system.experiment import build, build_model, config_from_json
from fl_system.seeding import derive_seed

_STATE = "fl-system"  # context.state record holding what the handshake delivered

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
    cfg = config_from_json(config_json)
    extra = feddisco.handshake_metrics(cfg, lambda: local_training_data(cfg, node)[1])
    metrics = MetricRecord({protocol.PARTITION_ID: node.partition_id, **extra})
    return Message(RecordDict({protocol.METRICS: metrics}), reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    if _STATE not in context.state.config_records:
        raise RuntimeError("train message before the handshake: this node has no run config")
    config_json = str(context.state.config_records[_STATE][protocol.RUN_CONFIG])
    cfg = config_from_json(config_json)
    node = NodeIdentity.from_context(context)
    apply_thread_limit()
    received = wire.unpack(msg.content)
    server_round = int(received.config_records[protocol.CONFIG][protocol.SERVER_ROUND])
    x, y = local_training_data(cfg, node)
    model = _model_for(config_json)
    model.load_state_dict(received.array_records[protocol.ARRAYS].to_torch_state_dict())
    result = train_locally(
        model,
        x,
        y,
        _rule_factory(config_json)(),
        TrainSettings(**OmegaConf.to_container(cfg.train)),
        seed=derive_seed(cfg.seed, server_round, node.partition_id),
        device=resolve_device(node.device),
        received=received,
        state=ClientState(context.state, node.state_root(), cfg.run_id, node.partition_id),
    )
    content = RecordDict(
        {
            protocol.ARRAYS: ArrayRecord(model.state_dict()),
            protocol.METRICS: MetricRecord(
                {
                    protocol.PARTITION_ID: node.partition_id,
                    protocol.NUM_EXAMPLES: result.num_examples,
                    protocol.TRAIN_LOSS: result.mean_loss,
                    protocol.NUM_STEPS: result.steps,
                    protocol.COMPUTE_SECONDS: result.seconds,
                    **feddisco.train_metrics(cfg, y, received.config_records[protocol.CONFIG]),
                }
            ),
        }
    )
    for name, record in result.extras.items():
        content[name] = record
    return Message(wire.pack(content), reply_to=msg)

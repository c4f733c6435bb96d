"""A round's message, opened: the run's config, this node, the received model and state.

Every ClientApp message but the handshake starts here (`open_message`): the config comes
from `context.state`, where the handshake put it, and the model object is built once per
process and run (`Sources.model`), then overwritten with the received weights.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict
from omegaconf import DictConfig, OmegaConf
from torch import nn

from client_app.compression import receive_model
from client_app.local_data import NodeIdentity
from client_app.sources import Sources
from client_app.state import ClientState
from fl_system.config.experiment import build_compression
from fl_system.learning.compression import Compression
from fl_system.learning.devices import apply_thread_limit
from fl_system.messages import protocol, wire
from fl_system.settings.config_nodes import config_from_json

STATE = "fl-system"  # context.state record holding what the handshake delivered


class _Models(threading.local):
    """The models of this thread's last runs, by (sources, config)."""

    def __init__(self) -> None:
        self.built: dict[tuple[Sources, str], nn.Module] = {}


_models = _Models()
_RUNS_KEPT = 2


def model_for(sources: Sources, config_json: str) -> nn.Module:
    """One model object per thread and run; each message overwrites all of its weights.

    A simulated client process serves many messages, and rebuilding the model for each one
    costs more than training it on a small partition. Per thread: the vectorised backend
    answers a chunk's messages in threads of one process, each training its own copy.
    """
    built, key = _models.built, (sources, config_json)
    if key not in built:
        if len(built) >= _RUNS_KEPT:
            built.pop(next(iter(built)))
        built[key] = sources.model(config_from_json(config_json))
    return built[key]


@functools.lru_cache(maxsize=4)
def compression_for(config_json: str, direction: str = "up") -> Compression | None:
    """How this run's models travel that way (None: as they are)."""
    return build_compression(config_from_json(config_json), direction)


def run_config(context: Context) -> str:
    if STATE not in context.state.config_records:
        raise RuntimeError(protocol.NO_RUN_CONFIG)
    return str(context.state.config_records[STATE][protocol.RUN_CONFIG])


@dataclass(frozen=True)
class Incoming:
    """A round's message, opened: the run, this node, the content and the loaded model."""

    config_json: str
    cfg: DictConfig
    node: NodeIdentity
    received: RecordDict
    config: ConfigRecord
    server_round: int
    model: nn.Module
    state: ClientState
    sources: Sources

    @functools.cached_property
    def data(self) -> tuple[np.ndarray, np.ndarray]:
        """The node's training data, read when first used: an evaluate message needs none
        (a node holding its own data would normalise all of it for nothing)."""
        return self.sources.training(self.cfg, self.node)


def open_message(msg: Message, context: Context, sources: Sources) -> Incoming:
    config_json = run_config(context)
    cfg = config_from_json(config_json)
    node = NodeIdentity.from_context(context)
    apply_thread_limit()
    content = wire.unpack(msg.content)
    server_round = int(content.config_records[protocol.CONFIG][protocol.SERVER_ROUND])
    state = ClientState(
        context.state,
        node.state_root(),
        cfg.run_id,
        node.partition_id,
        server_round,
        int(OmegaConf.select(cfg, "checkpoint.every", default=1)),
    )
    model = model_for(sources, config_json)
    received = receive_model(
        compression_for(config_json, "down"), content, state, list(model.state_dict())
    )
    config = received.config_records[protocol.CONFIG]
    model.load_state_dict(received.array_records[protocol.ARRAYS].to_torch_state_dict())
    return Incoming(
        config_json,
        cfg,
        node,
        received,
        config,
        server_round,
        model,
        state,
        sources,
    )

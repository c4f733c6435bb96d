"""The clients a study plays: freeloaders, malicious clients and slow devices.

`clients.freeloaders` train nothing and reply as if they had; `clients.malicious` train, then
send a hostile or broken reply in place of their model (fl_system.learning.freeloaders, .malicious);
`clients.slow` train, then sleep per step taken, as a slower device would have taken longer.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from omegaconf import OmegaConf

from client_app.incoming import Incoming
from client_app.trainer import TrainSettings, batches
from fl_system.learning.freeloaders import freeload
from fl_system.learning.malicious import tamper
from fl_system.learning.seeding import derive_seed
from fl_system.messages import protocol

_FREELOADER_SEED = 0xF4EE  # a noise freeloader's draws
_FREELOADER_STATE = "freeloader-last-global"  # ClientState: the global model received last


def is_freeloader(got: Incoming) -> bool:
    """Whether the study plays this client as a freeloader (`clients.freeloaders.ids`)."""
    return got.node.partition_id in OmegaConf.select(got.cfg, "clients.freeloaders.ids", default=[])


def is_malicious(got: Incoming) -> bool:
    """Whether the study plays this client as malicious (`clients.malicious.ids`)."""
    return got.node.partition_id in OmegaConf.select(got.cfg, "clients.malicious.ids", default=[])


def slow_down(got: Incoming, steps: int) -> None:
    """clients.slow: this partition's device is slower; it sleeps `seconds_per_step` for each
    of the `steps` it took (wall time only: the virtual clock has its own profiles)."""
    slow = OmegaConf.select(got.cfg, "clients.slow", default=None)
    if slow is not None and got.node.partition_id in slow.ids:
        time.sleep(float(slow.seconds_per_step) * steps)


def freeloader_reply(got: Incoming) -> tuple[MetricRecord, RecordDict]:
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


def tampered_reply(got: Incoming, metrics: MetricRecord) -> RecordDict:
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

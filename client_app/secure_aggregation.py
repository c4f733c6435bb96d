"""`secagg=secaggplus`, the client's half: Flower's own `secaggplus_mod` around local training.

The server's four SecAgg+ stages all come as training messages carrying the protocol's
configs record; the mod answers setup, key sharing and unmasking itself, and at the masked
collection it calls local training, then quantises, masks and sends [w, w * v] in place of
the model (every array of the reply cleared). What the mod reads is Flower's legacy `FitRes`
layout; `_as_fitres` turns this project's reply into it: v is the update (the trained model
less the model received, float layers), w the reply's example count. The reply's metrics
(examples, loss, partition) travel as they are.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from flwr.app import Context, Message
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common import recorddict_compat as compat

from fl_system.messages import protocol, wire

Train = Callable[[Message, Context], Message]


def is_secure(msg: Message) -> bool:
    """Whether the server runs this training message through SecAgg+."""
    return RECORD_KEY_CONFIGS in msg.content.config_records


def secure_train(msg: Message, context: Context, train: Train) -> Message:
    """One SecAgg+ stage: the mod's, with `train` as the masked collection's training."""
    return secaggplus_mod(msg, context, functools.partial(_as_fitres, train=train))


def _as_fitres(msg: Message, context: Context, train: Train) -> Message:
    reply = train(msg, context)
    if reply.has_error():
        return reply
    content = wire.unpack(reply.content)
    received = wire.unpack(msg.content).array_records[protocol.ARRAYS]
    trained = content.array_records[protocol.ARRAYS]
    update = [
        (t - r).astype(np.float64) if np.issubdtype(t.dtype, np.floating) else np.zeros(t.shape)
        for t, r in zip(trained.to_numpy_ndarrays(), received.to_numpy_ndarrays(), strict=True)
    ]
    metrics = content.metric_records[protocol.METRICS]
    fitres = FitRes(
        Status(Code.OK, ""),
        ndarrays_to_parameters(update),
        int(metrics[protocol.NUM_EXAMPLES]),
        {},
    )
    out = compat.fitres_to_recorddict(fitres, keep_input=False)
    out[protocol.METRICS] = metrics
    return Message(out, reply_to=msg)

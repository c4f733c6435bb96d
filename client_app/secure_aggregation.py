"""`secagg=secaggplus`, the client's half: Flower's own `secaggplus_mod` around local training.

The server's four SecAgg+ stages all come as training messages carrying the protocol's
configs record; the mod answers setup, key sharing and unmasking itself, and at the masked
collection it calls local training, then quantises, masks and sends [w, w * v] in place of
the model (every array of the reply cleared). What the mod reads is Flower's legacy `FitRes`
layout; `_as_fitres` turns this project's reply into it: v is the update (the trained model
less the model received, float layers), w the weight the server fixed at setup (from what
this client reported there: `weighing`). The reply's metrics (examples, loss, partition)
travel as they are. Records the strategy needs only in sum (`protocol.SECURE_RECORDS`,
SCAFFOLD's dc_k) follow the update in v, each divided by the client's quantised weight r, so
that r v adds them to the sum unweighted. A message naming a secure sum
(`protocol.SECURE_SUM`) is answered with this client's term of it (`summand`) instead of
training, weighed max_weight (r = 1), so that the server's average times the number of
clients summed is the plain sum.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MetricRecord
from flwr.client.mod import secaggplus_mod
from flwr.client.mod.secure_aggregation.secaggplus_mod import SecAggPlusState
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.common.secure_aggregation.secaggplus_constants import (
    RECORD_KEY_CONFIGS,
    RECORD_KEY_STATE,
    Key,
    Stage,
)
from flwr.compat.common import recorddict_compat as compat

from fl_system.messages import protocol, wire

Train = Callable[[Message, Context], Message]
Weighing = Callable[[Message, Context], MetricRecord]  # what the server weighs a client by
Summand = Callable[[Message, Context], np.ndarray]  # this client's term of a secure sum


def is_secure(msg: Message) -> bool:
    """Whether the server runs this training message through SecAgg+."""
    return RECORD_KEY_CONFIGS in msg.content.config_records


def secure_train(
    msg: Message, context: Context, train: Train, weighing: Weighing, summand: Summand
) -> Message:
    """One SecAgg+ stage: the mod's, with `train` (or `summand`) as the masked collection's
    work; the setup's reply also carries `weighing`'s metrics."""
    stage = msg.content.config_records[RECORD_KEY_CONFIGS][Key.STAGE]  # the mod pops it
    collect = functools.partial(_as_fitres, train=train, summand=summand)
    reply = secaggplus_mod(msg, context, collect)
    if stage == Stage.SETUP and not reply.has_error():
        reply.content[protocol.METRICS] = weighing(msg, context)
    return reply


def _as_fitres(msg: Message, context: Context, train: Train, summand: Summand) -> Message:
    config = msg.content.config_records[protocol.CONFIG]
    if protocol.SECURE_SUM in config:  # weighed max_weight: its average times n is the sum
        state = _mod_state(context)
        most, clip = state.max_weight, state.clipping_range
        term = summand(msg, context)
        if np.abs(term).max(initial=0.0) > clip * most:
            raise ValueError(
                f"this client's term of the secure sum '{config[protocol.SECURE_SUM]}' reaches "
                f"{np.abs(term).max():g}, above secagg.clipping_range x secagg.max_weight "
                f"({clip:g} x {most:g}): raise secagg.max_weight"
            )
        return _fitres_reply(msg, [term / most], most, MetricRecord())
    weight = float(config[protocol.SECAGG_WEIGHT])
    configs = msg.content.config_records.pop(RECORD_KEY_CONFIGS)  # Flower's DP mods read one
    try:
        reply = train(msg, context)
    finally:
        msg.content[RECORD_KEY_CONFIGS] = configs
    if reply.has_error():
        return reply
    content = wire.unpack(reply.content)
    received = wire.unpack(msg.content).array_records[protocol.ARRAYS]
    trained = content.array_records[protocol.ARRAYS]
    update = [
        (t - r).astype(np.float64) if np.issubdtype(t.dtype, np.floating) else np.zeros(t.shape)
        for t, r in zip(trained.to_numpy_ndarrays(), received.to_numpy_ndarrays(), strict=True)
    ]
    names = [str(n) for n in config.get(protocol.SECURE_RECORDS, [])]
    summed = [content.array_records[name] for name in names]
    if summed:  # divided by the r the mod weighs by: r * (x / r) = x enters the plain sum
        r = _ratio(weight, context)
        update += [
            a.astype(np.float64) / r for record in summed for a in record.to_numpy_ndarrays()
        ]
    layout = ConfigRecord({n: list(rec.keys()) for n, rec in zip(names, summed, strict=True)})
    return _fitres_reply(msg, update, weight, content.metric_records[protocol.METRICS], layout)


def _ratio(weight: float, context: Context) -> float:
    """The mod's quantised weight r = round(w / max_weight * T) / T (T its target range)."""
    state = _mod_state(context)
    levels = state.target_range
    r = round(weight / state.max_weight * levels) / levels
    if r == 0:
        raise ValueError(
            "this client's weight rounds to 0 under secure aggregation: the records it must "
            "add to the sum cannot travel (raise secagg.quantization_range)"
        )
    return r


def _mod_state(context: Context) -> SecAggPlusState:
    """The protocol's numbers as the mod keeps them since its setup stage."""
    return SecAggPlusState(**context.state.config_records[RECORD_KEY_STATE])


def _fitres_reply(
    msg: Message,
    vector: list[np.ndarray],
    weight: float,
    metrics: MetricRecord,
    layout: ConfigRecord | None = None,
) -> Message:
    """The reply in Flower's `FitRes` layout, which the mod reads: [w, w * v] to mask, and
    the layer names of the summed records that follow the update in v."""
    fitres = FitRes(Status(Code.OK, ""), ndarrays_to_parameters(vector), weight, {})  # type: ignore[arg-type]
    out = compat.fitres_to_recorddict(fitres, keep_input=False)
    out[protocol.METRICS] = metrics
    if layout:
        out[protocol.SECURE_LAYOUT] = layout
    return Message(out, reply_to=msg)

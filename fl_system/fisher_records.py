"""EFL's Fisher terms in messages: u and v (or the sums U and V) per layer, as `fisher_comm`
encodes them (`fl_system.efl.encode_fisher`), one ArrayRecord each plus one of packed
positions when only the largest entries travel. Both directions use it: clients send u, v;
the server sends U, V. Reading is format-driven, so the receiver needs only the shapes."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from fl_system.codecs import CodecError
from fl_system.efl import decode_fisher, encode_fisher


def fisher_records(
    pairs: Mapping[str, tuple[np.ndarray, np.ndarray]],
    keys: tuple[str, str, str],
    *,
    comm: str,
    q: float,
) -> RecordDict:
    """{fisher key: u per layer, weighted key: v per layer[, positions key: positions]}."""
    fisher_key, weighted_key, positions_key = keys
    fisher, weighted, positions = {}, {}, {}
    for name, (u, v) in pairs.items():
        eu, ev, packed = encode_fisher(u, v, comm=comm, q=q)
        fisher[name], weighted[name] = Array(eu), Array(ev)
        if packed is not None:
            positions[name] = Array(np.frombuffer(packed, dtype=np.uint8))
    out = RecordDict({fisher_key: ArrayRecord(fisher), weighted_key: ArrayRecord(weighted)})
    if positions:
        out[positions_key] = ArrayRecord(positions)
    return out


def read_fisher(
    content: RecordDict, keys: tuple[str, str, str], shapes: Mapping[str, tuple[int, ...]]
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Dense float32 {layer: (u, v)} from a message; raises CodecError naming what is wrong."""
    fisher_key, weighted_key, positions_key = keys
    fisher = content.array_records.get(fisher_key)
    weighted = content.array_records.get(weighted_key)
    positions = content.array_records.get(positions_key)
    if fisher is None or weighted is None:
        raise CodecError(f"lacks '{fisher_key}' or '{weighted_key}'")
    if set(fisher.keys()) != set(weighted.keys()):
        raise CodecError("u and v name different layers")
    out = {}
    for name in fisher:
        if name not in shapes:
            raise CodecError(f"u has layer '{name}' that the model does not have")
        packed = positions[name].numpy().tobytes() if positions and name in positions else None
        try:
            out[name] = decode_fisher(
                fisher[name].numpy(), weighted[name].numpy(), packed, tuple(shapes[name])
            )
        except CodecError as err:
            raise CodecError(f"layer '{name}': {err}") from None
    return out

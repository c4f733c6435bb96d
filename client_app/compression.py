"""The client's halves of compression: its update encoded (`compression.up`), and the global
model rebuilt from compressed broadcasts (`compression.down`).

The update of every floating-point tensor (parameters and float buffers) is what the codec
sees, with this client's residual carried between rounds in its state (so it survives a
SuperNode restart, like SCAFFOLD's c_i); integer tensors travel dense as they are.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from flwr.app import Array, ArrayRecord, RecordDict

from client_app.state import ClientState
from fl_system.learning.compression import Compression, blob_array, is_compressed
from fl_system.messages import protocol

RESIDUAL = "compression-up-residual"  # the client state record of the residual


def compress_model(
    compression: Compression,
    start: ArrayRecord,
    end: dict[str, np.ndarray],
    state: ClientState,
    rng: np.random.Generator,
) -> tuple[ArrayRecord, ArrayRecord]:
    """(the dense rest of the model, the encoded update) for a reply; keeps the residual.
    The rest is empty when every tensor is floating point."""
    reference = dict(zip(start.keys(), start.to_numpy_ndarrays(), strict=True))
    names = [k for k, v in reference.items() if is_compressed(v)]
    update = [np.asarray(end[k], dtype=np.float32) - reference[k] for k in names]
    saved = state.load(RESIDUAL)
    residual = saved.to_numpy_ndarrays() if saved is not None else None
    blob, _, kept = compression.encode(update, residual, rng)
    if kept is not None:
        state.save(RESIDUAL, ArrayRecord({k: Array(r) for k, r in zip(names, kept, strict=True)}))
    dense = ArrayRecord({k: Array(np.asarray(end[k])) for k in reference if k not in names})
    return dense, ArrayRecord({protocol.BLOB: blob_array(blob)})


HELD = "compression-down-model"  # client state: the global model it holds (float tensors)
_VERSION = "__version__"  # ... and, in the same record, that model's version


def receive_model(
    compression: Compression | None,
    received: RecordDict,
    state: ClientState,
    order: Sequence[str],
) -> RecordDict:
    """`received` with the whole global model under ARRAYS (keys in `order`, the model's).

    Under `compression.down` the server sends a version and either the whole model or the
    broadcasts since the version this client holds; the client applies the ones past its
    own, saves the model it now holds, and goes on as if the whole model had come.
    """
    config = received.config_records.get(protocol.CONFIG)
    if config is None or protocol.MODEL_VERSION not in config:
        return received  # models travel whole
    version = int(config[protocol.MODEL_VERSION])
    arrays = received.array_records[protocol.ARRAYS]
    updates = received.array_records.get(protocol.DOWN_UPDATES)
    if updates is None:
        held = {k: arrays[k].numpy() for k in arrays if is_compressed(arrays[k].numpy())}
        _save_held(state, held, version)
    else:
        held = _catch_up(compression, updates, state, version)
    whole = ArrayRecord({k: Array(held[k]) if k in held else arrays[k] for k in order})
    out = RecordDict({k: v for k, v in received.items() if k != protocol.DOWN_UPDATES})
    out[protocol.ARRAYS] = whole
    return out


def _catch_up(
    compression: Compression | None, updates: ArrayRecord, state: ClientState, version: int
) -> dict[str, np.ndarray]:
    """The held model moved to `version` by the broadcasts past the version it is at."""
    saved = state.load(HELD)
    if compression is None or saved is None:
        raise ValueError(
            "the server sent model updates but this client holds no model to apply them to"
        )
    have = int(saved[_VERSION].numpy()[0])
    held = {k: saved[k].numpy() for k in saved if k != _VERSION}
    steps = sorted(int(v) for v in updates)
    first = steps[0] if steps else version + 1
    if not first - 1 <= have <= version:
        raise ValueError(
            f"this client holds model version {have}; the server's broadcasts lead from "
            f"version {first - 1} to {version}"
        )
    if have == version:
        return held
    names = list(held)
    for v in (v for v in steps if v > have):
        decoded = compression.decode(updates[str(v)].numpy(), [held[k].shape for k in names])
        held = {k: held[k] + d for k, d in zip(names, decoded, strict=True)}
    _save_held(state, held, version)
    return held


def _save_held(state: ClientState, held: dict[str, np.ndarray], version: int) -> None:
    record = {k: Array(v) for k, v in held.items()}
    record[_VERSION] = Array(np.array([version], dtype=np.int64))
    state.save(HELD, ArrayRecord(record))

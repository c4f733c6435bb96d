"""The client's half of `compression.up`: its update since the received model, encoded.

The update of every floating-point tensor (parameters and float buffers) is what the codec
sees, with this client's residual carried between rounds in its state (so it survives a
SuperNode restart, like SCAFFOLD's c_i); integer tensors travel dense as they are.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord

from client_app.state import ClientState
from fl_system import protocol
from fl_system.compression import Compression, is_compressed

RESIDUAL = "compression-up-residual"  # the client state record of the residual


def compress_model(
    compression: Compression,
    start: ArrayRecord,
    end: dict[str, np.ndarray],
    state: ClientState,
    rng: np.random.Generator,
) -> tuple[ArrayRecord, ArrayRecord]:
    """(the dense rest of the model, the encoded update) for a reply; keeps the residual."""
    reference = dict(zip(start.keys(), start.to_numpy_ndarrays(), strict=True))
    names = [k for k, v in reference.items() if is_compressed(v)]
    update = [np.asarray(end[k], dtype=np.float32) - reference[k] for k in names]
    saved = state.load(RESIDUAL)
    residual = saved.to_numpy_ndarrays() if saved is not None else None
    blob, _, kept = compression.encode(update, residual, rng)
    if kept is not None:
        state.save(RESIDUAL, ArrayRecord({k: Array(r) for k, r in zip(names, kept, strict=True)}))
    dense = ArrayRecord({k: Array(np.asarray(end[k])) for k in reference if k not in names})
    return dense, ArrayRecord({protocol.BLOB: Array(blob)})

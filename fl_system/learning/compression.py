"""Compression of a whole model update: one codec per tensor, optional error feedback, and one
byte blob on the wire (a uint32 tensor count, a uint32 length per tensor, the encodings),
carried as raw bytes in one Array (`blob_array`): no .npy header, which would weigh 128 bytes
beside a sparse update of a couple of kB.

Built from `compression.up` / `compression.down` (a codec from `fl_system.learning.codecs` and
`error_feedback`). The sender keeps its residual between messages (client state for the
uplink, server state for the downlink); the receiver decodes with the shapes it already knows.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import Array

from fl_system.learning.codecs import Codec, CodecError, feedback_scale, transmit, with_feedback

_U32 = np.dtype("<u4")
RAW = "raw"  # the stype of a blob's Array: its bytes as they are


def blob_array(blob: np.ndarray) -> Array:
    """An encoded update as an Array of its bytes alone."""
    data = np.asarray(blob, dtype=np.uint8).tobytes()
    return Array(dtype="uint8", shape=(len(data),), stype=RAW, data=data)


def array_blob(array: Array) -> np.ndarray:
    """The bytes `blob_array` wrapped; another kind of Array raises CodecError."""
    if array.stype != RAW or array.dtype != "uint8":
        raise CodecError(f"an encoded update travels as raw bytes, got a {array.stype} Array")
    return np.frombuffer(array.data, dtype=np.uint8)


def is_compressed(array: np.ndarray) -> bool:
    """The tensors a model update's codec covers: floating point (parameters, float buffers);
    integer buffers travel dense. Both sides decide from the model the server sent."""
    return np.issubdtype(array.dtype, np.floating)


def pack_encodings(encodings: Sequence[bytes]) -> np.ndarray:
    """The encodings of a model's tensors as one uint8 array."""
    header = np.array([len(encodings), *map(len, encodings)], dtype=_U32).tobytes()
    return np.frombuffer(header + b"".join(encodings), dtype=np.uint8)


def unpack_encodings(blob: np.ndarray, count: int) -> list[bytes]:
    """The `count` encodings `pack_encodings` joined; a blob that does not fit raises."""
    data = np.asarray(blob, dtype=np.uint8).tobytes()
    head = 4 * (count + 1)
    stored = int(np.frombuffer(data[:4], dtype=_U32)[0]) if len(data) >= 4 else None
    if stored is not None and stored != count:
        raise CodecError(f"update holds {stored} tensors, the model has {count}")
    if len(data) < head:
        raise CodecError(f"update of {len(data)} bytes is shorter than its header")
    lengths = np.frombuffer(data[4:head], dtype=_U32).tolist()
    if head + sum(lengths) != len(data):
        raise CodecError(f"update is {len(data)} bytes, its header announces {head + sum(lengths)}")
    ends = np.cumsum([head, *lengths]).tolist()
    return [data[start:end] for start, end in itertools.pairwise(ends)]


@dataclass(frozen=True)
class Compression:
    """How an update travels one way: `codec` per tensor, with or without error feedback."""

    codec: Codec
    error_feedback: bool = True

    def encode(
        self,
        update: Sequence[np.ndarray],
        residual: Sequence[np.ndarray] | None,
        rng: np.random.Generator,
    ) -> tuple[np.ndarray, list[np.ndarray], list[np.ndarray] | None]:
        """(blob, the update as the receiver decodes it, the residual to keep: None without
        error feedback). A missing residual counts as zeros (the first message)."""
        encodings, decoded, kept = [], [], []
        for i, tensor in enumerate(update):
            if self.error_feedback:
                carried = residual[i] if residual is not None else 0.0
                data, sent, left = with_feedback(self.codec, tensor, carried, rng)
                kept.append(left)
            else:
                data, sent = transmit(self.codec, tensor, rng)
            encodings.append(data)
            decoded.append(sent)
        return pack_encodings(encodings), decoded, kept if self.error_feedback else None

    def decode(self, blob: np.ndarray, shapes: Sequence[tuple[int, ...]]) -> list[np.ndarray]:
        """The update's tensors, shaped (and scaled as the sender's error feedback scaled
        them: `feedback_scale`); CodecError names what does not fit."""
        encodings = unpack_encodings(blob, len(shapes))
        out = []
        for i, (data, shape) in enumerate(zip(encodings, shapes, strict=True)):
            n = int(np.prod(shape))
            try:
                tensor = self.codec.decode(data, n).reshape(shape)
            except CodecError as err:
                raise CodecError(f"tensor {i}: {err}") from err
            out.append(tensor * feedback_scale(self.codec, n) if self.error_feedback else tensor)
        return out

    def analytic_bits(self, shapes: Sequence[tuple[int, ...]], *, golomb: bool = False) -> float:
        """The bits EFL spec 2.9 counts for one update of tensors of these shapes."""
        return sum(self.codec.analytic_bits(int(np.prod(s)), golomb=golomb) for s in shapes)

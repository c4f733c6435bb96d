"""The server's half of `compression.up`: replies turned back into whole models.

A reply that carries an encoded update (`protocol.UPDATE`) is decoded against the model
that was sent to that node, so strategies see whole models whatever the codec. One that
cannot be decoded (truncated, positions out of range, another model's shape) is marked
rejected with the reason; the strategy sets it aside like any failed reply, and the round
goes on with the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from flwr.app import Array, ArrayRecord, Message, RecordDict

from fl_system.learning.codecs import CodecError
from fl_system.learning.compression import Compression, array_blob, is_compressed
from fl_system.messages import protocol


@dataclass
class UpdateTally:
    """What the encoded updates of one exchange weighed, measured and as spec EFL 2.9 counts."""

    update_bytes: int = 0  # the blobs as sent
    bits_naive: float = 0.0
    bits_golomb: float = 0.0

    def add(self, other: UpdateTally) -> None:
        self.update_bytes += other.update_bytes
        self.bits_naive += other.bits_naive
        self.bits_golomb += other.bits_golomb


def expand_replies(
    compression: Compression, sent: Sequence[Message], replies: Sequence[Message]
) -> UpdateTally:
    """Decode, in place, every reply carrying an encoded update; what they weighed."""
    models = {m.metadata.dst_node_id: m.content.array_records.get(protocol.ARRAYS) for m in sent}
    tally = UpdateTally()
    for reply in replies:
        tally.add(expand_reply(compression, models.get(reply.metadata.src_node_id), reply))
    return tally


def expand_reply(
    compression: Compression, reference: ArrayRecord | None, reply: Message
) -> UpdateTally:
    """Decode, in place, one reply's encoded update against `reference`, the model sent to
    its node (a reply without one is left as it is); what it weighed."""
    tally = UpdateTally()
    if reply.has_error() or protocol.UPDATE not in reply.content.array_records:
        return tally
    try:
        if reference is None:
            raise CodecError("an update for a model this node was not sent")
        blob = array_blob(reply.content.array_records[protocol.UPDATE][protocol.BLOB])
        arrays, shapes = _whole_model(compression, reference, reply.content, blob)
    except (CodecError, KeyError, ValueError) as err:
        reply.content = protocol.rejected(reply.content, f"compressed update rejected: {err}")
        return tally
    reply.content[protocol.ARRAYS] = arrays
    del reply.content[protocol.UPDATE]
    tally.update_bytes = blob.size
    tally.bits_naive = compression.analytic_bits(shapes)
    tally.bits_golomb = compression.analytic_bits(shapes, golomb=True)
    return tally


def _whole_model(
    compression: Compression, reference: ArrayRecord, content: RecordDict, blob: np.ndarray
) -> tuple[ArrayRecord, list[tuple[int, ...]]]:
    """reference + decoded update for the codec's tensors, the reply's own for the rest (a
    reply whose model is all floating point sends no rest); and the codec's tensors' shapes."""
    dense = content.array_records.get(protocol.ARRAYS, ArrayRecord())
    base = dict(zip(reference.keys(), reference.to_numpy_ndarrays(), strict=True))
    names = [k for k, v in base.items() if is_compressed(v)]
    shapes = [base[k].shape for k in names]
    update = dict(zip(names, compression.decode(blob, shapes), strict=True))
    out = {}
    for name, value in base.items():
        if name in update:
            out[name] = Array((value + update[name]).astype(value.dtype, copy=False))
        else:
            out[name] = Array(dense[name].numpy())  # KeyError: the dense part lacks a tensor
    return ArrayRecord(out), shapes

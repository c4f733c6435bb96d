"""How models travel: each ArrayRecord as one flat array per dtype plus a small layout record.

Flower moves every Array of a message as its own objects (an Array and its chunks), each one
a separate request at every hop: a CNN's 10 tensors make a 24-object message. Packing the
tensors of a record into one array per dtype cuts that to a handful, which is most of the
per-message cost of a real-process round. The server's exchange and the ClientApp pack what
they send and unpack what they receive, so strategies and local rules never see it.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from fl_system.messages import npy_arrays

# Every process that packs or unpacks our messages (ServerApp, ClientApp, simulation engine
# and workers, one's own Flower app using our strategies) converts Flower's Arrays with
# headers made once per shape: the same bytes and arrays as Flower's own conversion.
npy_arrays.install()

LAYOUT = ".layout"  # suffix of the ConfigRecord describing a packed ArrayRecord
_NAMES, _DTYPES, _NDIMS, _SHAPES = "names", "dtypes", "ndims", "shapes"


def pack(content: RecordDict) -> RecordDict:
    """`content` with every ArrayRecord of two or more arrays packed; the rest unchanged."""
    return pack_each([content])[0]


def pack_each(contents: list[RecordDict]) -> list[RecordDict]:
    """Every content packed; an ArrayRecord object that several share is packed only once.

    A round's messages usually all carry the same global model object: packing it once per
    message would cost a concatenation and a serialization per client on the server.
    """
    done: dict[int, tuple[ArrayRecord, ConfigRecord]] = {}
    packed_contents = []
    for content in contents:
        packed = RecordDict()
        for name, record in content.items():
            if isinstance(record, ArrayRecord) and len(record) > 1:
                if id(record) not in done:
                    done[id(record)] = _pack_record(record)
                packed[name], packed[name + LAYOUT] = done[id(record)]
            else:
                packed[name] = record
        packed_contents.append(packed)
    return packed_contents


def is_packed(content: RecordDict) -> bool:
    """Whether `content` holds a packed ArrayRecord (a reply goes back in the format the
    request came in: Flower's own loop and its mods send and expect plain records)."""
    return any(name.endswith(LAYOUT) for name in content.config_records)


def unpack(content: RecordDict) -> RecordDict:
    """The inverse of `pack`: every packed ArrayRecord restored, layouts dropped."""
    layouts = {name for name in content.config_records if name.endswith(LAYOUT)}
    unpacked = RecordDict()
    for name, record in content.items():
        if name in layouts:
            continue
        layout = name + LAYOUT
        if layout in layouts:
            unpacked[name] = _unpack_record(record, content.config_records[layout])
        else:
            unpacked[name] = record
    return unpacked


def _pack_record(record: ArrayRecord) -> tuple[ArrayRecord, ConfigRecord]:
    arrays = {name: record[name].numpy() for name in record}
    dtypes = sorted({a.dtype.str for a in arrays.values()})
    flat = {
        dtype: np.concatenate([a.ravel() for a in arrays.values() if a.dtype.str == dtype])
        for dtype in dtypes
    }
    layout = ConfigRecord(
        {
            _NAMES: list(arrays),
            _DTYPES: [a.dtype.str for a in arrays.values()],
            _NDIMS: [a.ndim for a in arrays.values()],
            _SHAPES: [int(d) for a in arrays.values() for d in a.shape],
        }
    )
    return ArrayRecord({dtype: Array(values) for dtype, values in flat.items()}), layout


def _unpack_record(record: ArrayRecord, layout: ConfigRecord) -> ArrayRecord:
    flat = {dtype: record[dtype].numpy() for dtype in record}
    offsets = dict.fromkeys(flat, 0)
    shapes = list(layout[_SHAPES])
    arrays: dict[str, Array] = {}
    for name, dtype, ndim in zip(layout[_NAMES], layout[_DTYPES], layout[_NDIMS], strict=True):
        shape, shapes = tuple(shapes[:ndim]), shapes[ndim:]
        size = int(np.prod(shape, dtype=np.int64))
        start = offsets[dtype]
        values = flat[dtype][start : start + size]
        if values.size != size:
            raise ValueError(f"packed ArrayRecord does not match its layout at '{name}'")
        arrays[name] = Array(values.reshape(shape))
        offsets[dtype] = start + size
    if shapes or any(offsets[d] != flat[d].size for d in flat):
        raise ValueError("packed ArrayRecord does not match its layout")
    return ArrayRecord(arrays)

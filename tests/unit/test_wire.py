"""Packing ArrayRecords for the wire: exact round trips, fewer objects, untouched extras."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects

from fl_system.messages import wire


def _model_record() -> ArrayRecord:
    return ArrayRecord(
        {
            "conv.weight": Array(np.arange(24, dtype=np.float32).reshape(2, 3, 2, 2)),
            "conv.bias": Array(np.array([0.5, -1.5], dtype=np.float32)),
            "steps": Array(np.array(7, dtype=np.int64)),  # 0-d, another dtype
            "fc.weight": Array(np.full((3, 4), 2.25, dtype=np.float32)),
        }
    )


def _content() -> RecordDict:
    return RecordDict(
        {
            "arrays": _model_record(),
            "single": ArrayRecord({"c": Array(np.ones(3, dtype=np.float32))}),
            "config": ConfigRecord({"server-round": 3}),
            "metrics": MetricRecord({"loss": 0.25}),
        }
    )


def test_round_trip_is_exact_in_names_order_shapes_and_dtypes() -> None:
    original = _content()
    restored = wire.unpack(wire.pack(original))
    assert list(restored.keys()) == list(original.keys())
    for name in ("arrays", "single"):
        before, after = original.array_records[name], restored.array_records[name]
        assert list(after) == list(before)
        for key in before:
            a, b = before[key].numpy(), after[key].numpy()
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_array_equal(a, b)
    assert restored.config_records["config"]["server-round"] == 3
    assert restored.metric_records["metrics"]["loss"] == 0.25


def test_packed_record_holds_one_flat_array_per_dtype() -> None:
    packed = wire.pack(_content())
    flat = packed.array_records["arrays"]
    assert sorted(flat) == ["<f4", "<i8"]
    np.testing.assert_array_equal(
        flat["<f4"].numpy(),
        np.concatenate([np.arange(24), [0.5, -1.5], np.full(12, 2.25)]).astype(np.float32),
    )
    assert flat["<i8"].numpy().tolist() == [7]
    layout = packed.config_records["arrays" + wire.LAYOUT]
    assert list(layout["shapes"]) == [2, 3, 2, 2, 2, 3, 4]
    assert list(layout["ndims"]) == [4, 1, 0, 2]
    # A record with one array is already one object: left as it is.
    assert "single" + wire.LAYOUT not in packed.config_records


def test_packing_cuts_the_objects_flower_moves() -> None:
    def objects(content: RecordDict) -> int:
        return len(get_all_nested_objects(Message(content, dst_node_id=1, message_type="train")))

    # message, record dict, 2 array records, config, metrics + (array, chunk) per array
    assert objects(_content()) == 6 + 2 * 5
    # ... plus one layout record, and only 3 arrays left: the 2 flat ones and "single"
    assert objects(wire.pack(_content())) == 7 + 2 * 3


def test_a_model_shared_by_several_contents_is_packed_once() -> None:
    """A round's messages share one global model: the packed copies share its packed form."""
    model, other = _model_record(), _model_record()
    contents = [RecordDict({"arrays": model}), RecordDict({"arrays": model, "mine": other})]
    first, second = wire.pack_each(contents)
    assert first.array_records["arrays"] is second.array_records["arrays"]
    assert (
        first.config_records["arrays" + wire.LAYOUT]
        is second.config_records["arrays" + wire.LAYOUT]
    )
    assert second.array_records["mine"] is not second.array_records["arrays"]
    for packed, content in zip((first, second), contents, strict=True):
        restored = wire.unpack(packed)
        assert list(restored.keys()) == list(content.keys())
        for name, record in content.array_records.items():
            for key in record:
                np.testing.assert_array_equal(
                    restored.array_records[name][key].numpy(), record[key].numpy()
                )


def test_unpacked_content_without_layouts_is_unchanged() -> None:
    content = RecordDict({"config": ConfigRecord({"a": 1})})
    assert wire.unpack(content).config_records["config"]["a"] == 1


def test_layout_mismatch_is_an_error() -> None:
    packed = wire.pack(_content())
    layout = packed.config_records["arrays" + wire.LAYOUT]
    layout["shapes"] = [2, 3, 2, 2, 2, 3, 5]  # fc.weight 3x5 needs 3 more values
    with pytest.raises(ValueError, match="does not match its layout"):
        wire.unpack(packed)

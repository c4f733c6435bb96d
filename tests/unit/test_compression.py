"""Whole-update compression (learning.compression): the blob format, per-tensor codecs with
and without error feedback, and updates that do not fit the model."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array

from fl_system.learning.codecs import CodecError, Dense, Qsgd, SparseTernary, TopK
from fl_system.learning.compression import (
    Compression,
    array_blob,
    blob_array,
    pack_encodings,
    unpack_encodings,
)

SHAPES = [(3, 4), (5,), (2, 2, 2)]
RNG = np.random.default_rng(0)


def update() -> list[np.ndarray]:
    return [RNG.standard_normal(s).astype(np.float32) for s in SHAPES]


def test_blob_is_a_count_lengths_and_the_encodings() -> None:
    blob = pack_encodings([b"ab", b"", b"xyz"])
    assert blob.dtype == np.uint8
    assert blob.tobytes() == np.array([3, 2, 0, 3], "<u4").tobytes() + b"abxyz"
    assert unpack_encodings(blob, 3) == [b"ab", b"", b"xyz"]


def test_a_blob_travels_as_its_bytes_alone() -> None:
    """The Array holds exactly the blob's bytes (no .npy header) and gives them back."""
    blob = pack_encodings([b"ab", b"xyz"])
    array = blob_array(blob)
    assert array.data == blob.tobytes()
    assert array_blob(array).tobytes() == blob.tobytes()
    with pytest.raises(CodecError, match=r"travels as raw bytes, got a numpy\.ndarray Array"):
        array_blob(Array(blob))


@pytest.mark.parametrize(
    "blob,count,message",
    [
        (pack_encodings([b"ab", b"c"]), 3, "holds 2 tensors, the model has 3"),
        (pack_encodings([b"ab", b"c"])[:-1], 2, "is 14 bytes, its header announces 15"),
        (np.concatenate([pack_encodings([b"ab"]), [0]]).astype(np.uint8), 1, "header announces"),
        (np.zeros(3, np.uint8), 1, "shorter than its header"),
    ],
)
def test_blobs_that_do_not_fit_are_rejected(blob: np.ndarray, count: int, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        unpack_encodings(blob, count)


def test_each_tensor_is_compressed_on_its_own() -> None:
    """One mu and k = floor(q n) entries per tensor: 3 of 12, 1 of 5, 2 of 8."""
    compression = Compression(SparseTernary(q=0.25))
    blob, decoded, residual = compression.encode(update(), None, RNG)
    assert [np.count_nonzero(d) for d in decoded] == [3, 1, 2]
    for tensor in decoded:
        assert len(set(np.abs(tensor[tensor != 0]).tolist())) == 1
    again = compression.decode(blob, SHAPES)
    assert all(np.array_equal(a, b) for a, b in zip(again, decoded, strict=True))
    assert [r.shape for r in residual] == SHAPES


def test_error_feedback_carries_what_was_not_sent_across_messages() -> None:
    compression = Compression(TopK(q=0.2))
    inputs = [update() for _ in range(10)]
    residual, sent_total = None, [np.zeros(s) for s in SHAPES]
    for message in inputs:
        blob, _, residual = compression.encode(message, residual, RNG)
        for total, tensor in zip(sent_total, compression.decode(blob, SHAPES), strict=True):
            total += tensor
    for i, shape in enumerate(SHAPES):
        expected = np.sum([m[i] for m in inputs], axis=0)
        np.testing.assert_allclose(sent_total[i] + residual[i], expected, atol=1e-5)
        assert sent_total[i].shape == shape


@pytest.mark.parametrize("feedback", [True, False])
def test_the_receiver_decodes_what_the_sender_counted_as_sent(feedback: bool) -> None:
    """QSGD under error feedback is scaled by 1 / (1 + omega) at both ends: the residual
    the sender keeps is exactly what the receiver did not get."""
    compression = Compression(Qsgd(levels=2), error_feedback=feedback)
    message = update()
    blob, sent, residual = compression.encode(message, None, RNG)
    for received, kept, original in zip(
        compression.decode(blob, SHAPES), sent, message, strict=True
    ):
        np.testing.assert_array_equal(received, kept)
        omega = min(original.size / 4, np.sqrt(original.size) / 2)
        assert np.abs(received).max() <= np.linalg.norm(original) / (1 + omega * feedback) * 1.0001
    assert (residual is not None) == feedback


def test_without_error_feedback_nothing_is_kept_or_carried() -> None:
    compression = Compression(TopK(q=0.2), error_feedback=False)
    message = update()
    big_residual = [np.full(s, 100.0, np.float32) for s in SHAPES]
    blob, _, residual = compression.encode(message, big_residual, RNG)
    assert residual is None
    fresh, _, _ = compression.encode(message, None, RNG)
    assert np.array_equal(blob, fresh)  # the residual passed in was ignored


def test_dense_updates_round_trip_exactly() -> None:
    message = update()
    blob, _, _ = Compression(Dense()).encode(message, None, RNG)
    assert len(blob) == 4 * (1 + 3) + 4 * (12 + 5 + 8)
    decoded = Compression(Dense()).decode(blob, SHAPES)
    assert all(np.array_equal(a, b) for a, b in zip(decoded, message, strict=True))


def test_a_tensor_that_does_not_decode_is_named() -> None:
    blob, _, _ = Compression(TopK(q=0.25)).encode(update(), None, RNG)
    with pytest.raises(CodecError, match=r"tensor 0: top-k tensor \(n=12, k=6\): expected"):
        Compression(TopK(q=0.5)).decode(blob, SHAPES)  # k differs from the sender's


def test_analytic_bits_sum_over_tensors() -> None:
    compression = Compression(SparseTernary(q=0.25))
    per_tensor = [32 + 3 * (1 + 4), 32 + 1 * (1 + 3), 32 + 2 * (1 + 3)]
    assert compression.analytic_bits(SHAPES) == sum(per_tensor)

"""compression.up on mock messages: the client's encoded update becomes a whole model on the
server (server_app.compression), and replies that cannot be decoded are set aside with the
reason while the others are used."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

from client_app.compression import RESIDUAL, compress_model
from client_app.state import ClientState
from fl_system.learning.codecs import SparseTernary, TopK
from fl_system.learning.compression import Compression, array_blob, blob_array
from fl_system.learning.golomb import encode_positions
from fl_system.messages import protocol
from server_app.compression import expand_replies
from server_app.federated.screening import unpack_replies
from server_app.strategies.fedavg import FedAvg
from tests.mock_replies import plan

RNG = np.random.default_rng(0)
MODEL = ArrayRecord(
    {
        "w": Array(RNG.standard_normal((4, 5)).astype(np.float32)),
        "b": Array(np.zeros(5, np.float32)),
        "steps": Array(np.array([7], np.int64)),  # an integer buffer: travels dense
    }
)


def sent_to(node_id: int) -> Message:
    content = RecordDict(
        {protocol.ARRAYS: MODEL, protocol.CONFIG: ConfigRecord({protocol.SERVER_ROUND: 1})}
    )
    return Message(content, dst_node_id=node_id, message_type=MessageType.TRAIN)


def trained(shift: float) -> dict[str, np.ndarray]:
    model = {k: v.copy() for k, v in zip(MODEL.keys(), MODEL.to_numpy_ndarrays(), strict=True)}
    model["w"] += shift * np.arange(20, dtype=np.float32).reshape(4, 5)
    model["b"] += shift
    model["steps"] = np.array([9], np.int64)
    return model


def client_reply(
    sent: Message, compression: Compression, end: dict, state: ClientState, partition: int
) -> Message:
    dense, update = compress_model(compression, MODEL, end, state, np.random.default_rng(1))
    metrics = MetricRecord({protocol.PARTITION_ID: partition, protocol.NUM_EXAMPLES: 10})
    content = RecordDict(
        {protocol.ARRAYS: dense, protocol.UPDATE: update, protocol.METRICS: metrics}
    )
    return Message(content, reply_to=sent)


def state(tmp_path: Path, partition: int = 0, server_round: int = 1) -> ClientState:
    return ClientState(RecordDict(), tmp_path, "run", partition, server_round)


def test_an_encoded_update_becomes_the_sent_model_plus_the_decoded_update(tmp_path: Path) -> None:
    compression = Compression(TopK(q=0.25))  # w: 5 of 20 kept; b: 1 of 5
    sent = sent_to(11)
    reply = client_reply(sent, compression, trained(0.1), state(tmp_path), 0)
    assert set(reply.content.array_records[protocol.ARRAYS].keys()) == {"steps"}

    tally = expand_replies(compression, [sent], [reply])

    whole = reply.content.array_records[protocol.ARRAYS]
    assert list(whole.keys()) == ["w", "b", "steps"]
    w0 = MODEL["w"].numpy()
    expected_w = w0.copy().reshape(-1)
    expected_w[15:] += 0.1 * np.arange(15, 20, dtype=np.float32)  # the 5 largest changes
    np.testing.assert_allclose(whole["w"].numpy().reshape(-1), expected_w, rtol=1e-6)
    assert np.count_nonzero(whole["b"].numpy()) == 1  # one of five equal changes, the first
    assert whole["b"].numpy()[0] == np.float32(0.1)
    assert whole["steps"].numpy().tolist() == [9]
    assert protocol.UPDATE not in reply.content.array_records
    # header (count, 2 lengths); w: 5 floats, positions 15..19 at b = 1 (17 bits);
    # b: 1 float, position 0 at b = 2 (3 bits)
    assert tally.update_bytes == 12 + (4 * 5 + 3) + (4 + 1)
    assert tally.bits_naive == 5 * (32 + 5) + 1 * (32 + 3)


def test_the_residual_is_kept_in_client_state_and_survives_a_restart(tmp_path: Path) -> None:
    compression = Compression(SparseTernary(q=0.25))
    first = state(tmp_path)
    client_reply(sent_to(1), compression, trained(0.1), first, 0)
    kept = first.load(RESIDUAL)
    assert kept is not None and list(kept.keys()) == ["w", "b"]
    restarted = state(tmp_path, server_round=2)  # a new node process in round 2: empty memory
    restored = restarted.load(RESIDUAL)
    assert restored is not None
    for a, b in zip(kept.to_numpy_ndarrays(), restored.to_numpy_ndarrays(), strict=True):
        assert np.array_equal(a, b)
    # The next round's update carries it: update + residual is what gets encoded.
    quiet = trained(0.0)
    reply = client_reply(sent_to(1), compression, quiet, restarted, 0)
    expand_replies(compression, [sent_to(1)], [reply])
    moved = reply.content.array_records[protocol.ARRAYS]["w"].numpy() - MODEL["w"].numpy()
    assert np.count_nonzero(moved) == 5  # no training progress, yet the residual went out


def test_undecodable_replies_are_set_aside_with_the_reason_and_the_rest_is_used(
    tmp_path: Path,
) -> None:
    compression = Compression(TopK(q=0.25))
    sent = [sent_to(n) for n in (1, 2, 3, 4)]
    good = client_reply(sent[0], compression, trained(0.1), state(tmp_path, 0), 0)
    truncated = client_reply(sent[1], compression, trained(0.2), state(tmp_path, 1), 1)
    blob = array_blob(truncated.content.array_records[protocol.UPDATE][protocol.BLOB])
    truncated.content[protocol.UPDATE] = ArrayRecord({protocol.BLOB: blob_array(blob[:-3])})
    out_of_range = client_reply(sent[2], compression, trained(0.3), state(tmp_path, 2), 2)
    bad_w = np.ones(5, np.float32).tobytes() + encode_positions(np.array([1, 2, 3, 4, 20]), 21)
    bad_b = np.ones(1, np.float32).tobytes() + encode_positions(np.array([0]), 5)
    header = np.array([2, len(bad_w), len(bad_b)], "<u4").tobytes()  # 2 tensors and their sizes
    blob = np.frombuffer(header + bad_w + bad_b, np.uint8)
    out_of_range.content[protocol.UPDATE] = ArrayRecord({protocol.BLOB: blob_array(blob)})
    stranger = client_reply(sent_to(9), compression, trained(0.1), state(tmp_path, 3), 3)

    replies = [good, truncated, out_of_range, stranger]
    expand_replies(compression, sent, replies)
    ok, failures = unpack_replies(replies)

    assert [r.partition_id for r in ok] == [0]
    reasons = {f.node_id: f.reason for f in failures}
    assert reasons[2] == "compressed update rejected: update is 37 bytes, its header announces 40"
    assert reasons[3] == (
        "compressed update rejected: tensor 0: position 20 is past a tensor of 20 entries"
    )
    assert reasons[9] == "compressed update rejected: an update for a model this node was not sent"
    # The strategy completes the round with the one usable reply.
    result = FedAvg().finish_round(plan({1: 0, 2: 1, 3: 2, 4: 3}, MODEL), replies)
    assert result.participants == 1
    assert len(result.failures) == 3

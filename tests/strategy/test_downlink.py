"""compression.down on mock messages: the server's broadcasts and a client's catch-up give the
client the server's global model bit for bit (server_app.downlink, client_app.compression)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Error,
    Message,
    MessageType,
    RecordDict,
)

from client_app.compression import receive_model
from client_app.state import ClientState
from fl_system.learning.codecs import SparseTernary, TopK
from fl_system.learning.compression import Compression
from fl_system.messages import protocol
from server_app.downlink import Downlink

RNG = np.random.default_rng(0)
ORDER = ["w", "steps", "b"]
COMPRESSION = Compression(SparseTernary(q=0.2))


def model(w: np.ndarray, b: np.ndarray, steps: int = 7) -> ArrayRecord:
    return ArrayRecord(
        {
            "w": Array(w.astype(np.float32)),
            "steps": Array(np.array([steps], np.int64)),
            "b": Array(b.astype(np.float32)),
        }
    )


def random_model() -> ArrayRecord:
    return model(RNG.standard_normal((4, 5)), RNG.standard_normal(5))


def message(node: int, arrays: ArrayRecord, rnd: int) -> Message:
    content = RecordDict(
        {protocol.ARRAYS: arrays, protocol.CONFIG: ConfigRecord({protocol.SERVER_ROUND: rnd})}
    )
    return Message(content, dst_node_id=node, message_type=MessageType.TRAIN)


def deliver(
    downlink: Downlink, global_model: ArrayRecord, states: dict[int, ClientState], rnd: int
) -> dict[int, ArrayRecord]:
    """Send the global model to the partitions in `states` (node id = 10 + partition) and
    return what each client rebuilt; the clients answer."""
    nodes = {10 + pid: pid for pid in states}
    sent = downlink.outgoing([message(n, global_model, rnd) for n in nodes], nodes, global_model)
    rebuilt = {}
    for msg in sent:
        pid = nodes[msg.metadata.dst_node_id]
        received = receive_model(COMPRESSION, msg.content, states[pid], ORDER)
        rebuilt[pid] = received.array_records[protocol.ARRAYS]
    downlink.confirm([Message(RecordDict(), reply_to=_with_id(m)) for m in sent])
    return rebuilt


def _with_id(msg: Message) -> Message:
    """A sent message gets its id when pushed; replies need one to point to."""
    msg.metadata.__dict__["_message_id"] = f"m{msg.metadata.dst_node_id}"
    return msg


def same(a: ArrayRecord, b: ArrayRecord) -> bool:
    return list(a.keys()) == list(b.keys()) and all(
        np.array_equal(a[k].numpy(), b[k].numpy()) for k in a
    )


def test_clients_hold_the_servers_model_bit_for_bit_round_after_round(tmp_path: Path) -> None:
    downlink = Downlink(COMPRESSION, seed=0)
    global_model = random_model()
    downlink.start(global_model)
    states = {pid: ClientState(RecordDict(), tmp_path, "run", pid, 1) for pid in range(3)}
    for rnd in range(1, 6):
        # partition 2 sits rounds 2 and 3 out: it catches up with two broadcasts in round 4
        present = {p: s for p, s in states.items() if not (p == 2 and rnd in (2, 3))}
        rebuilt = deliver(downlink, global_model, present, rnd)
        for arrays in rebuilt.values():
            assert same(arrays, global_model)
        global_model, size = downlink.commit(random_model(), rnd)
        assert size > 0
    assert downlink.version == 5


def test_what_travels(tmp_path: Path) -> None:
    downlink = Downlink(COMPRESSION, seed=0)
    first = random_model()
    downlink.start(first)
    states = {0: ClientState(RecordDict(), tmp_path, "run", 0, 1)}
    nodes = {10: 0}
    (whole,) = downlink.outgoing([message(10, first, 1)], nodes, first)
    assert protocol.DOWN_UPDATES not in whole.content.array_records  # first contact
    assert list(whole.content.array_records[protocol.ARRAYS].keys()) == ORDER
    deliver(downlink, first, states, 1)
    second, _ = downlink.commit(random_model(), 1)
    (delta,) = downlink.outgoing([message(10, second, 2)], nodes, second)
    records = delta.content.array_records
    assert list(records[protocol.ARRAYS].keys()) == ["steps"]  # integer tensors stay dense
    assert list(records[protocol.DOWN_UPDATES].keys()) == ["1"]
    assert delta.content.config_records[protocol.CONFIG][protocol.MODEL_VERSION] == 1
    deliver(downlink, second, states, 2)
    (again,) = downlink.outgoing([message(10, second, 2)], nodes, second)  # e.g. a 2nd exchange
    assert list(again.content.array_records[protocol.DOWN_UPDATES].keys()) == []
    other = random_model()  # a strategy's own per-client model is sent as it is
    (own,) = downlink.outgoing([message(10, other, 2)], nodes, second)
    assert own.content.array_records[protocol.ARRAYS] is other


def test_a_client_too_far_behind_gets_the_whole_model(tmp_path: Path) -> None:
    downlink = Downlink(COMPRESSION, seed=0, history=2)
    global_model = random_model()
    downlink.start(global_model)
    state = ClientState(RecordDict(), tmp_path, "run", 0, 1)
    deliver(downlink, global_model, {0: state}, 1)
    for rnd in (1, 2, 3):
        global_model, _ = downlink.commit(random_model(), rnd)
    (msg,) = downlink.outgoing([message(10, global_model, 4)], {10: 0}, global_model)
    assert protocol.DOWN_UPDATES not in msg.content.array_records
    assert same(deliver(downlink, global_model, {0: state}, 4)[0], global_model)


def test_a_client_that_lost_its_model_says_so(tmp_path: Path) -> None:
    downlink = Downlink(COMPRESSION, seed=0)
    global_model = random_model()
    downlink.start(global_model)
    deliver(downlink, global_model, {0: ClientState(RecordDict(), tmp_path, "run", 0, 1)}, 1)
    global_model, _ = downlink.commit(random_model(), 1)
    (msg,) = downlink.outgoing([message(10, global_model, 2)], {10: 0}, global_model)
    blank = ClientState(RecordDict(), tmp_path / "elsewhere", "run", 0, 2)
    with pytest.raises(ValueError, match="holds no model to apply them to"):
        receive_model(COMPRESSION, msg.content, blank, ORDER)
    downlink.confirm([Message(Error(code=0, reason="no model"), reply_to=_with_id(msg))])
    (retry,) = downlink.outgoing([message(10, global_model, 2)], {10: 0}, global_model)
    assert protocol.DOWN_UPDATES not in retry.content.array_records  # the whole model again


def test_the_downlink_survives_a_checkpoint(tmp_path: Path) -> None:
    downlink = Downlink(COMPRESSION, seed=0)
    global_model = random_model()
    downlink.start(global_model)
    states = {0: ClientState(RecordDict(), tmp_path, "run", 0, 1)}
    deliver(downlink, global_model, states, 1)
    global_model, _ = downlink.commit(random_model(), 1)
    restored = Downlink(COMPRESSION, seed=0)
    restored.load_state_dict(downlink.state_dict(), global_model)
    assert restored.version == 1 and restored.synced == {0: 0}
    new = random_model()
    assert same(downlink.commit(new, 2)[0], restored.commit(new, 2)[0])


def test_server_apply_full_counts_the_residual_twice() -> None:
    """Top-1 of 2 entries (spec 2.7): the literal server model moves by all of
    Delta^G = w - held + R while clients apply top-1 of it.
    Round 1: w = [3, 1]: Delta = [3, 1], sent [3, 0], R = [0, 1]; held = [3, 0],
    server [3, 1]. Round 2: w = held: Delta = [0, 1], sent [0, 1], R = 0; held = [3, 1],
    server [3, 2]: the residual went in twice. The recommended form evaluates held."""
    start = ArrayRecord({"w": Array(np.zeros(2, np.float32))})
    downlinks = {
        mode: Downlink(Compression(TopK(q=0.5)), seed=0, server_apply=mode)
        for mode in ("recommended", "full")
    }
    for d in downlinks.values():
        d.start(start)
    for d in downlinks.values():
        held, _ = d.commit(ArrayRecord({"w": Array(np.array([3.0, 1.0], np.float32))}), 1)
        assert held["w"].numpy().tolist() == [3.0, 0.0]
        held, _ = d.commit(held, 2)
        assert held["w"].numpy().tolist() == [3.0, 1.0]
    full, recommended = downlinks["full"], downlinks["recommended"]
    assert full.evaluated(held)["w"].numpy().tolist() == [3.0, 2.0]
    assert recommended.evaluated(held) is held
    restored = Downlink(Compression(TopK(q=0.5)), seed=0, server_apply="full")
    restored.load_state_dict(full.state_dict(), held)
    assert restored.evaluated(held)["w"].numpy().tolist() == [3.0, 2.0]
    with pytest.raises(ValueError, match=r"compression\.server_apply must be one of recommended"):
        Downlink(COMPRESSION, seed=0, server_apply="literal")


def test_broadcasts_are_kept_while_together_they_weigh_less_than_the_model() -> None:
    downlink = Downlink(COMPRESSION, seed=0)
    global_model = random_model()
    downlink.start(global_model)
    sizes = []
    for rnd in range(1, 13):
        global_model, size = downlink.commit(random_model(), rnd)
        sizes.append(size)
    dense = 4 * (20 + 5)  # w and b as float32; the integer counter always travels dense
    kept = len(downlink.broadcasts)
    assert sorted(downlink.broadcasts) == list(range(13 - kept, 13))
    assert sum(sizes[-kept:]) <= dense < sum(sizes[-kept - 1 :])

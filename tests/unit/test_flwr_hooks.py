"""The flwr internals fl-supernode patches: checked at start-up so an flwr upgrade fails loudly."""

from __future__ import annotations

import socket
import time
import types
from pathlib import Path

import flwr.cli.install as flwr_install
import flwr.supernode.runtime.run_clientapp as flwr_run_clientapp
import flwr.supernode.start_client_internal as flwr_loop
import httpx
import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects
from flwr.supercore.runtime import RuntimeHttpClient

from fl_system.flower import FlwrInternalsChanged, flwr_hooks, flwr_tasks
from fl_system.flower.wakeups import FALLBACK_POLL_SECONDS, MESSAGE_STORED, node_socket
from fl_system.runtime import flwr_check
from fl_system.runtime.supernode.node import runtime_api_address
from fl_system.runtime.supernode.polling import PollSchedule, Wakeups


def test_check_passes_on_the_pinned_flwr() -> None:
    flwr_check.check()


def _changed(monkeypatch: pytest.MonkeyPatch, target: str, value: object) -> str:
    """check()'s message after replacing `target` (undone after the test)."""
    monkeypatch.setattr(target, value)
    with pytest.raises(FlwrInternalsChanged) as raised:
        flwr_check.check()
    return str(raised.value)


def test_a_loop_without_the_time_module_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The poll schedule works by swapping `time` in the SuperNode loop's module."""
    fake = types.SimpleNamespace(sleep=time.sleep, monotonic=time.monotonic)
    message = _changed(monkeypatch, "flwr.supernode.start_client_internal.time", fake)
    assert "start_client_internal no longer imports the time module" in message
    assert "1.42" in message  # says which flwr the code was written against


def test_a_fab_install_not_through_install_from_fab_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The FAB cache replaces run_clientapp's install_from_fab; another function would bypass it."""

    def other_install(fab_file: bytes, install_dir: Path | None = None) -> Path:
        raise AssertionError("never called")

    message = _changed(
        monkeypatch, "flwr.supernode.runtime.run_clientapp.install_from_fab", other_install
    )
    assert "run_clientapp no longer installs FABs through install_from_fab" in message


def test_a_loop_without_the_sleeps_and_pull_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every problem is listed at once, so one upgrade attempt shows all the work."""

    def start_client_internal() -> None:
        time.sleep(5)

    message = _changed(
        monkeypatch, "flwr.supernode.start_client_internal.start_client_internal",
        start_client_internal,
    )  # fmt: skip
    assert "start_client_internal no longer sleeps time.sleep(3)" in message
    assert "start_client_internal no longer calls _pull_and_store_message" in message
    assert "no longer calls _push_messages(state=...) by keyword" in message
    assert "_push_messages no longer sleeps" not in message  # only what changed is reported


def test_a_reply_wait_without_its_sleep_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def _push_messages() -> None:
        time.sleep(1)

    message = _changed(monkeypatch, "flwr.supernode.start_client_internal._push_messages",
                       _push_messages)  # fmt: skip
    assert "_push_messages no longer sleeps time.sleep(0.5)" in message


def test_a_changed_run_clientapp_signature_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    def run_clientapp(runtime_api_address: str, token: str) -> None:
        raise AssertionError("never called")

    message = _changed(
        monkeypatch, "flwr.supernode.runtime.run_clientapp.run_clientapp", run_clientapp
    )
    assert "run_clientapp lacks parameters ['certificates', 'insecure', 'parent_pid']" in message


def test_a_runtime_client_without_acquire_task_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launcher claims a task in one Runtime API call."""
    monkeypatch.delattr(RuntimeHttpClient, "AcquireTask")
    with pytest.raises(FlwrInternalsChanged, match="RuntimeHttpClient has no AcquireTask"):
        flwr_check.check()


# ----- what the hooks do once installed ----------------------------------------------------
class _FakeTime:
    """Stands in for the time module: a settable clock and a record of sleeps."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_the_node_loop_sleeps_by_the_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Flower's 3 s idle sleep follows the schedule, its 0.5 s reply wait becomes `reply`,
    and a pulled message restarts the active window."""
    fake = _FakeTime()
    monkeypatch.setattr(flwr_hooks, "time", fake)
    run_ids = iter([None, 7])
    monkeypatch.setattr(flwr_loop, "_pull_and_store_message", lambda *a, **k: next(run_ids))
    monkeypatch.setattr(flwr_loop, "time", flwr_loop.time)  # restored after the test
    woken: list[int] = []
    schedule = PollSchedule(active=0.1, idle=3.0, active_window=30.0, reply=0.02)
    flwr_hooks.install_poll_schedule(schedule, on_message=lambda: woken.append(1))

    clock = flwr_loop.time
    clock.sleep(3)
    fake.now += 31.0  # past the window: backing off
    clock.sleep(3)
    clock.sleep(0.5)
    clock.sleep(1.25)  # any other sleep is left alone
    assert fake.slept == [0.1, 1.6, 0.02, 1.25]
    assert clock.monotonic() == fake.now  # everything else is the real module's

    assert flwr_loop._pull_and_store_message() is None
    assert woken == []
    assert flwr_loop._pull_and_store_message() == 7  # a message: wake the launcher
    assert woken == [1]
    clock.sleep(3)
    assert fake.slept[-1] == 0.1  # active again


class _NodeState:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id

    def get_node_id(self) -> int:
        return self.node_id


def test_a_node_that_can_be_woken_listens_as_its_id_and_waits_for_a_wake_up(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Each pull first listens at the node's socket and forgets the wake-ups it covers; the
    idle sleep then waits on that socket for the schedule's wait, at least the fallback's."""
    fake = _FakeTime()
    monkeypatch.setattr(flwr_hooks, "time", fake)
    monkeypatch.setattr(flwr_loop, "_pull_and_store_message", lambda *a, **k: None)
    monkeypatch.setattr(flwr_loop, "time", flwr_loop.time)
    waits: list[float] = []
    node = Wakeups(str(tmp_path))
    monkeypatch.setattr(node, "wait", waits.append)
    schedule = PollSchedule(active=0.1, idle=3.0, active_window=30.0, reply=0.02)
    flwr_hooks.install_poll_schedule(schedule, on_message=lambda: None, wakeups=node)

    flwr_loop._pull_and_store_message(state=_NodeState(42))
    assert node.node_id == 42 and Path(node_socket(tmp_path, 42)).is_socket()
    flwr_loop.time.sleep(3)
    fake.now += 60.0  # idle: the schedule's 3 s
    flwr_loop.time.sleep(3)
    flwr_loop.time.sleep(0.5)  # the reply wait is not a pull's
    assert waits == [FALLBACK_POLL_SECONDS, 3.0] and fake.slept == [0.02]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as superlink:
        superlink.sendto(MESSAGE_STORED, node_socket(tmp_path, 42))
    flwr_loop._pull_and_store_message(_NodeState(42))  # Flower's state, passed by position
    assert node.sock is not None
    with pytest.raises(BlockingIOError):  # drained before the pull
        node.sock.recv(64)
    node.close()


def test_a_fab_is_installed_once_per_hash(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Flower installs the FAB for every message; the cache installs each FAB once."""
    installs: list[bytes] = []

    def install(fab_file: bytes, install_dir: Path | None = None, **kwargs: object) -> Path:
        installs.append(fab_file)
        path = tmp_path / "apps" / f"app-{len(installs)}"
        path.mkdir(parents=True)
        (path / "module.py").write_text("VALUE = 1\n")
        return path

    monkeypatch.setattr(flwr_install, "install_from_fab", install)
    monkeypatch.setattr(flwr_run_clientapp, "install_from_fab", flwr_run_clientapp.install_from_fab)
    flwr_tasks.install_fab_cache()

    first = flwr_run_clientapp.install_from_fab(b"fab one", tmp_path)
    again = flwr_run_clientapp.install_from_fab(b"fab one", tmp_path)
    other = flwr_run_clientapp.install_from_fab(b"fab two", tmp_path)
    assert installs == [b"fab one", b"fab two"]
    assert first == again == tmp_path / "apps" / "app-1"
    assert other == tmp_path / "apps" / "app-2"
    assert list((first / "__pycache__").glob("module.*.pyc"))  # byte-compiled once, here


# ----- where the launcher finds the SuperNode's Runtime API --------------------------------
@pytest.mark.parametrize(
    ("args", "address"),
    [
        ([], "127.0.0.1:9094"),
        (["--insecure", "--superlink", "10.0.0.1:9092"], "127.0.0.1:9094"),
        (["--port", "19094"], "127.0.0.1:19094"),
        (["--host", "0.0.0.0", "--port=5000"], "0.0.0.0:5000"),
        (["--host=node.example", "--port", "1"], "node.example:1"),
        (["--host", "::1", "--port", "9094"], "[::1]:9094"),
        (["--host", "fe80::1:2", "--node-config", "partition-id=0"], "[fe80::1:2]:9094"),
    ],
)
def test_runtime_api_address(args: list[str], address: str) -> None:
    assert runtime_api_address(args) == address


@pytest.mark.parametrize("args", [["--isolation", "subprocess"], ["--isolation=process"]])
def test_isolation_is_rejected(args: list[str]) -> None:
    """fl-supernode must run in process isolation with its own launcher; a user's choice
    would silently run Flower's per-message interpreters instead."""
    with pytest.raises(ValueError, match="--isolation"):
        runtime_api_address(["--insecure", *args])


# ----- bytes on the wire -------------------------------------------------------------------
def _oracle_bytes(message: Message) -> int:
    """Every object of one message, each deflated and counted once, computed the plain way."""
    return sum(len(obj.deflate()) for obj in get_all_nested_objects(message).values())


def test_wire_bytes_is_the_sum_over_messages_sharing_a_model() -> None:
    model = ArrayRecord({"w": Array(np.arange(6, dtype=np.float32)), "b": Array(np.ones(2))})
    config = ConfigRecord({"server-round": 4, "names": ["a", "b"]})
    messages = [
        Message(
            RecordDict({"arrays": model, "config": config}), dst_node_id=node, message_type="train"
        )
        for node in (3, 4, 5)
    ]
    messages.append(Message(RecordDict({"config": config}), dst_node_id=6, message_type="train"))
    expected = [_oracle_bytes(m) for m in messages]
    assert flwr_hooks.wire_bytes(messages) == sum(expected)
    assert [flwr_hooks.wire_bytes([m]) for m in messages] == expected
    assert flwr_hooks.wire_bytes([]) == 0


@pytest.mark.parametrize("length", [0, 9, 10, 99_999, 100_000])
def test_a_chunks_size_is_counted_as_flower_deflates_it(length: int) -> None:
    from flwr.app.message.arraychunk import ArrayChunk

    chunk = ArrayChunk(memoryview(bytes(range(256)) * (length // 256) + bytes(length % 256)))
    assert flwr_hooks.deflated_size(chunk) == len(chunk.deflate())


def test_a_model_of_several_chunks_is_counted_exactly() -> None:
    from flwr.common.constant import FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE as CHUNK

    values = np.random.default_rng(0).standard_normal(CHUNK // 4 * 2 + 7).astype(np.float32)
    zeros = np.zeros(CHUNK // 4 * 3, np.float32)  # identical chunks travel once
    message = Message(
        RecordDict({"arrays": ArrayRecord({"v": Array(values), "z": Array(zeros)})}),
        dst_node_id=3,
        message_type="train",
    )
    assert flwr_hooks.wire_bytes([message]) == _oracle_bytes(message)


def _pulled(message_id: str, sender: int) -> types.SimpleNamespace:
    """A PullMessages response holding one reply's metadata."""
    metadata = types.SimpleNamespace(message_id=message_id, src_node_id=sender)
    return types.SimpleNamespace(messages_list=[types.SimpleNamespace(metadata=metadata)])


def test_a_reply_whose_sender_died_mid_upload_is_given_up_not_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The Grid's pull of a reply's objects stops once its sender is offline (Flower waits for
    the 180 s push session), and goes on waiting while the sender lives."""
    import flwr.superlink.grid.http_grid as flwr_http_grid
    from flwr.supercore.inflatable.inflatable_utils import (
        ObjectPullError,
        ObjectUnavailableError,
    )

    monkeypatch.setattr(flwr_hooks, "_sender_online", [])  # installs afresh, undone after
    monkeypatch.setattr(flwr_hooks, "_reply_senders", {})
    replies = {"dead-root": 7, "live-root": 8}
    monkeypatch.setattr(
        RuntimeHttpClient, "PullMessages", lambda self, request: _pulled(request, replies[request])
    )
    monkeypatch.setattr(flwr_http_grid, "pull_objects", flwr_http_grid.pull_objects)
    online = {8}
    asked: list[int] = []

    def is_online(node: int) -> bool:
        asked.append(node)
        return node in online

    flwr_hooks.abandon_replies_of_dead_senders(is_online)

    def never_uploaded(object_id: str) -> bytes:
        raise ObjectUnavailableError(object_id)

    RuntimeHttpClient.PullMessages(None, "dead-root")
    start = time.monotonic()
    with pytest.raises(ObjectPullError, match="its sender, node 7, went offline"):
        flwr_http_grid.pull_objects(object_ids=["a", "dead-root"], pull_object_fn=never_uploaded)
    assert time.monotonic() - start < 5 and 7 in asked

    tries: dict[str, int] = {}

    def uploaded_on_the_third_try(object_id: str) -> bytes:
        tries[object_id] = tries.get(object_id, 0) + 1
        if tries[object_id] < 3:
            raise ObjectUnavailableError(object_id)
        return object_id.encode()

    RuntimeHttpClient.PullMessages(None, "live-root")
    got = flwr_http_grid.pull_objects(
        object_ids=["b", "live-root"], pull_object_fn=uploaded_on_the_third_try
    )
    assert got == {"b": b"b", "live-root": b"live-root"} and 8 in asked


def test_a_killed_clientapp_report_without_the_node_state_hook_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The launcher's at-once error reply rides on the node state's own error replies."""
    from flwr.supernode.nodestate import InMemoryNodeState

    def store_error_replies(self: object, run_ids: set[int]) -> None:
        """Replies with one error of its own choosing: what a changed flwr might do."""

    monkeypatch.setattr(InMemoryNodeState, "_store_error_replies", store_error_replies)
    with pytest.raises(FlwrInternalsChanged, match="_store_error_replies no longer takes the err"):
        flwr_check.check()


def test_a_serverapp_runtime_without_a_parent_watch_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def run_serverapp(runtime_api_address: str, log_queue: object, token: str) -> None:
        raise AssertionError("never called")

    monkeypatch.setattr(flwr_tasks, "flwr_run_serverapp", run_serverapp)
    with pytest.raises(FlwrInternalsChanged, match=r"run_serverapp lacks parameters \['certif"):
        flwr_check.check()


def test_a_refused_call_of_an_admitted_node_is_said_with_the_superlinks_reason(
    monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Flower ends the node on a 401 without a word; the hook says why first and leaves
    Flower's handling of the error as it was."""
    from flwr.supernode.fleet_http_client import FleetHttpClient

    def answer(status: int, body: dict[str, str]) -> httpx.HTTPStatusError:
        request = httpx.Request("POST", "http://superlink/v1/fleet/pull-messages")
        response = httpx.Response(status, json=body, request=request)
        return httpx.HTTPStatusError("refused", request=request, response=response)

    refused = answer(401, {"detail": "Invalid SuperNode authentication"})
    unavailable = answer(503, {"detail": "busy"})
    errors = iter([refused, unavailable])

    def call(self: object, **kwargs: object) -> object:
        raise next(errors)

    monkeypatch.setattr(FleetHttpClient, "_unary_unary", call)
    flwr_hooks.say_when_refused()
    client = object.__new__(FleetHttpClient)
    for expected in (refused, unavailable):
        with pytest.raises(httpx.HTTPStatusError) as raised:
            client._unary_unary(path="/v1/fleet/pull-messages")
        assert raised.value is expected
    said = capsys.readouterr().err
    assert said == f"{flwr_hooks.REFUSED_LOG} Invalid SuperNode authentication\n"

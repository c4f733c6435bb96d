"""The simulation's forked ClientApp workers, on a real ClientApp and real processes."""

from __future__ import annotations

import os
import signal
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.client_app import ClientAppException

from fl_system.runtime.launch.worker_pool import DEPTH, PoolBackend, WorkerPool, pool_size

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Doubles the arrays, counts its calls in the node's state, fails or dawdles on request."""
    if msg.content["config"]["fail"]:
        raise ValueError("asked to fail")
    time.sleep(float(msg.content["config"]["sleep"]))
    os.write(1, f"trained in {os.getpid()}\n".encode())  # the process's output, as torch's
    arrays = msg.content["arrays"].to_numpy_ndarrays()
    calls = int(context.state.get("calls", MetricRecord({"n": 0}))["n"]) + 1
    context.state["calls"] = MetricRecord({"n": calls})
    reply = RecordDict(
        {"arrays": ArrayRecord([2 * a for a in arrays]), "pid": MetricRecord({"pid": os.getpid()})}
    )
    return Message(reply, reply_to=msg)


def _message(fail: bool = False, sleep: float = 0.0, first: float = 0.0) -> Message:
    from flwr.app import ConfigRecord

    content = RecordDict(
        {
            "arrays": ArrayRecord([first + np.arange(6, dtype=np.float32).reshape(2, 3)]),
            "config": ConfigRecord({"fail": fail, "sleep": sleep}),
        }
    )
    return Message(content, dst_node_id=7, message_type="train")


def _context() -> Context:
    return Context(
        run_id=1, node_id=7, node_config={"partition-id": 0}, state=RecordDict(), run_config={}
    )


@pytest.fixture
def pool():
    workers = WorkerPool(app, size=2)
    yield workers
    workers.close()


def test_pool_size_packs_clients_as_ray_does() -> None:
    assert pool_size(client_cpus=1, client_gpus=0, cpus=2, gpus=0) == 2
    assert pool_size(client_cpus=0.5, client_gpus=0, cpus=2, gpus=0) == 4
    assert pool_size(client_cpus=4, client_gpus=0, cpus=2, gpus=0) == 1  # at least one
    assert pool_size(client_cpus=1, client_gpus=0.5, cpus=16, gpus=1) == 2
    assert pool_size(client_cpus=1, client_gpus=1, cpus=16, gpus=3) == 3
    with pytest.raises(ValueError, match=r"client_gpus=0\.5 but this machine has no CUDA GPU"):
        pool_size(client_cpus=1, client_gpus=0.5, cpus=2, gpus=0)


def test_a_worker_runs_the_clientapp_and_returns_its_context(pool: WorkerPool) -> None:
    context = _context()
    reply, context = pool.run(_message(), context)
    np.testing.assert_array_equal(
        reply.content["arrays"].to_numpy_ndarrays()[0], 2 * np.arange(6).reshape(2, 3)
    )
    assert reply.content["pid"]["pid"] != os.getpid()  # it ran in a worker
    reply, context = pool.run(_message(), context)
    assert context.state["calls"]["n"] == 2  # the node's state travels with its context


def test_workers_run_messages_at_once(pool: WorkerPool) -> None:
    pids: list[int] = []
    gate = threading.Barrier(2)

    def one() -> None:
        gate.wait()
        reply, _ = pool.run(_message(), _context())
        pids.append(int(reply.content["pid"]["pid"]))

    threads = [threading.Thread(target=one) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(pids) == 2 and pool.is_idle()


def test_a_worker_holds_its_next_messages_and_each_reply_goes_to_its_sender() -> None:
    """DEPTH messages wait in a worker's pipe at once; each caller gets its own reply (the
    worker answers in the order sent), and no caller waits for a third slot."""
    pool = WorkerPool(app, size=1)
    got: dict[int, float] = {}
    try:

        def one(k: int) -> None:
            reply, _ = pool.run(_message(sleep=0.05, first=100.0 * k), _context())
            got[k] = float(reply.content["arrays"].to_numpy_ndarrays()[0].flat[0])

        threads = [threading.Thread(target=one, args=(k,)) for k in range(3 * DEPTH)]
        for t in threads:
            t.start()
        time.sleep(0.02)
        assert pool._workers[0].in_flight == DEPTH  # the rest wait for a slot
        for t in threads:
            t.join(30)
    finally:
        pool.close()
    assert got == {k: 200.0 * k for k in range(3 * DEPTH)}


def test_a_killed_worker_fails_every_message_it_held(pool: WorkerPool) -> None:
    victim = pool._workers[0]
    outcomes: list[str] = []

    def one() -> None:
        try:
            pool.run(_message(sleep=1.0), _context())
            outcomes.append("replied")
        except ClientAppException as err:
            outcomes.append(str(err).strip().rsplit("Message: ", 1)[-1])

    threads = [threading.Thread(target=one) for _ in range(2 * DEPTH)]  # both workers full
    for t in threads:
        t.start()
    time.sleep(0.3)
    assert victim.in_flight == DEPTH
    os.kill(victim.pid, signal.SIGKILL)
    for t in threads:
        t.join(30)
    died = f"worker process {victim.pid} died (killed by signal 9)"
    assert sorted(outcomes) == sorted([f"the ClientApp {died}"] * DEPTH + ["replied"] * DEPTH)
    assert pool.alive == 1


def test_a_clientapp_that_raises_is_the_nodes_error_and_the_worker_goes_on(
    pool: WorkerPool,
) -> None:
    with pytest.raises(ClientAppException, match="ValueError: asked to fail"):
        pool.run(_message(fail=True), _context())
    assert pool.alive == 2
    reply, _ = pool.run(_message(), _context())
    assert reply.has_content()


def test_a_killed_worker_fails_its_message_and_the_others_go_on(pool: WorkerPool) -> None:
    reply, _ = pool.run(_message(), _context())
    victim = int(reply.content["pid"]["pid"])
    os.kill(victim, signal.SIGKILL)
    seen = set()
    with pytest.raises(
        ClientAppException, match=f"worker process {victim} died .killed by signal 9"
    ):
        for _ in range(4):  # the idle queue hands workers out in turn: the victim comes up
            reply, _ = pool.run(_message(), _context())
            seen.add(int(reply.content["pid"]["pid"]))
    assert pool.alive == 1 and victim not in seen
    reply, _ = pool.run(_message(), _context())
    assert int(reply.content["pid"]["pid"]) != victim


def test_sigint_to_the_workers_fails_no_message(pool: WorkerPool) -> None:
    """A stop reaches the engine's whole process group as SIGINT: a busy worker must finish
    its message rather than fail it (the engine would report a client failure, and its
    ServerApp could checkpoint a partial round before the stop ends it)."""
    pids = {int(pool.run(_message(), _context())[0].content["pid"]["pid"]) for _ in range(2)}
    replies: list[Message] = []
    busy = threading.Thread(
        target=lambda: replies.append(pool.run(_message(sleep=0.5), _context())[0])
    )
    busy.start()
    time.sleep(0.2)
    for pid in pids:
        os.kill(pid, signal.SIGINT)
    busy.join(30)
    assert len(replies) == 1 and replies[0].has_content()
    assert pool.alive == 2


def test_each_run_writes_its_own_log(pool: WorkerPool, tmp_path: Path) -> None:
    first, second = tmp_path / "a.log", tmp_path / "b.log"
    pool.redirect_output(first)
    pool.run(_message(), _context())
    pool.redirect_output(second)
    reply, _ = pool.run(_message(), _context())
    assert f"trained in {int(reply.content['pid']['pid'])}" in second.read_text()
    assert first.read_text().count("trained in") == 1


def test_close_ends_every_worker() -> None:
    pool = WorkerPool(app, size=2)
    pids = [int(pool.run(_message(), _context())[0].content["pid"]["pid"]) for _ in range(2)]
    pool.close()
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_a_worker_whose_engine_ends_mid_message_exits_quietly(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A Ctrl-C can end the engine while it sends a worker a message: the worker reads a
    message cut short, which is the engine gone, not the worker's failure."""
    pool = WorkerPool(app, size=1)
    worker = pool._workers[0]
    os.write(worker.conn.fileno(), struct.pack("!i", 1000) + b"only part of it")
    pool.close()
    assert "Traceback" not in capfd.readouterr().err
    with pytest.raises(ChildProcessError):  # close reaped it: it ended on its own
        os.waitpid(worker.pid, os.WNOHANG)


def test_the_backend_refuses_another_clientapp(pool: WorkerPool) -> None:
    backend = PoolBackend(pool)
    backend.build(lambda: app)
    assert backend.num_workers == 2 * DEPTH  # Flower's engine threads: DEPTH per worker
    with pytest.raises(ClientAppException, match="another ClientApp"):
        backend.build(lambda: ClientApp())

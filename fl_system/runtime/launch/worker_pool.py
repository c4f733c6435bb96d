"""ClientApp workers forked from the simulation engine: Flower's `Backend` without Ray.

Flower's simulation engine hands each message to a `Backend`; its Ray backend starts a Ray
instance (~4 s on two cores) and one fresh interpreter per actor that imports torch and the
ClientApp again (~2 s each). These workers are forked from the engine once it has imported
the ClientApp, so they are ready in milliseconds, and they serve every run of a `-m` sweep.

Each worker runs the ClientApp exactly as Flower's Ray actor does (`app(message, context)`,
the updated context sent back); a ClientApp that raises becomes Flower's ClientAppException,
which the engine turns into the node's error reply. Each worker is handed up to DEPTH messages
at once (Flower's engine runs DEPTH threads per worker), in order through its pipe: while it
trains one client the next is already waiting, instead of idling through the engine's turn
around (handing its reply over, taking the next message: a third of a small client's time,
one interpreter lock shared by the engine's threads). Workers are forked before the engine
starts any thread (so no lock is copied half-held) and before anything touches CUDA (a forked
child cannot use a CUDA context its parent made), each on its share of the machine's GPUs.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, Pipe
from pathlib import Path
from typing import TypeVar

from flwr.app import Context, Message
from flwr.clientapp.client_app import ClientApp, ClientAppException
from flwr.common.serde import (
    context_from_proto,
    context_to_proto,
    message_from_proto,
    message_to_proto,
)
from flwr.proto.message_pb2 import Context as ProtoContext
from flwr.proto.message_pb2 import Message as ProtoMessage
from flwr.server.superlink.fleet.vce.backend import Backend, BackendConfig

from fl_system.runtime.launch.processes import write_into

GPU_ENV = "CUDA_VISIBLE_DEVICES"
T = TypeVar("T")


def pool_size(client_cpus: float, client_gpus: float, cpus: int, gpus: int) -> int:
    """How many ClientApps run at once: as many as the CPUs (and, when clients ask for GPU
    shares, the GPUs) hold, at least one, as Ray packs its actors."""
    size = max(int(cpus // client_cpus), 1)
    if client_gpus > 0:
        if gpus == 0:
            raise ValueError(f"runtime.client_gpus={client_gpus} but this machine has no CUDA GPU")
        size = min(size, max(int(gpus // client_gpus), 1))
    return size


DEPTH = 2  # messages in a worker's pipe at once: one it runs, one it takes next


@dataclass(eq=False)
class _Worker:
    pid: int
    conn: Connection
    in_flight: int = 0  # messages sent whose replies are not taken yet (the pool's lock)
    sent: int = 0  # tickets handed out, in the order the messages went down the pipe
    taken: int = 0  # replies taken: the reply to ticket t is taken when taken == t
    broken: bool = False  # a message found its pipe broken (set in turn)
    ended: str | None = None  # how it ended, once it died
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    turn: threading.Condition = field(default_factory=threading.Condition)


class WorkerPool:
    """`size` forked processes, each running `app` on the (message, context) it is sent."""

    def __init__(self, app: ClientApp, size: int, gpus: int = 0) -> None:
        self.app = app
        self._workers: list[_Worker] = []
        self._lock = threading.Condition()  # guards the list and each worker's in_flight
        self._next = 0  # where the search for the least busy worker starts: turns
        for index in range(size):
            parent_end, child_end = Pipe()
            pid = os.fork()
            if pid == 0:  # the worker: it keeps only its own end of its own pipe
                # A stop of the engine's process group ends the engine, not a message half-way
                # (which the engine would report as the client's failure): the worker exits
                # when its pipe closes.
                signal.signal(signal.SIGINT, signal.SIG_IGN)
                parent_end.close()
                for other in self._workers:
                    other.conn.close()
                if gpus:
                    os.environ[GPU_ENV] = _gpu_share(index, gpus)
                _serve(app, child_end)
            child_end.close()
            self._workers.append(_Worker(pid, parent_end))

    @property
    def alive(self) -> int:
        with self._lock:
            return len(self._workers)

    def is_idle(self) -> bool:
        with self._lock:
            return any(w.in_flight == 0 for w in self._workers)

    def run(self, message: Message, context: Context) -> tuple[Message, Context]:
        """Run the ClientApp on the least busy worker (waits while each has DEPTH)."""
        worker = self._borrow()
        try:
            outcome, payload = self._exchange(worker, _encode(message, context))
        except (EOFError, OSError) as died:
            raise ClientAppException(
                f"the ClientApp worker process {worker.pid} died ({self._lose(worker)})"
            ) from died
        finally:
            self._give_back(worker)
        if outcome == "error":
            raise ClientAppException(payload)
        return _decode(payload)

    def redirect_output(self, log: Path) -> None:
        """Every worker writes its output into `log` from now on (each run its own log)."""
        with self._lock:
            self._lock.wait_for(lambda: all(w.in_flight == 0 for w in self._workers))
            for worker in self._workers:  # between runs: nothing else is sent meanwhile
                worker.conn.send(("log", str(log)))
                worker.conn.recv()

    def close(self, wait: float = 1.0) -> None:
        """End every worker: each exits when its pipe closes; one still busy after `wait`
        seconds (the run failed under it) is killed."""
        with self._lock:
            workers, self._workers = self._workers, []
            self._lock.notify_all()
        for worker in workers:
            worker.conn.close()
        deadline = time.monotonic() + wait
        for worker in workers:
            while os.waitpid(worker.pid, os.WNOHANG) == (0, 0):
                if time.monotonic() > deadline:
                    os.kill(worker.pid, signal.SIGKILL)
                    os.waitpid(worker.pid, 0)
                    break
                time.sleep(0.01)

    def _borrow(self) -> _Worker:
        """The live worker with the fewest messages in its pipe (the next in turn among
        equals), once one has fewer than DEPTH."""
        with self._lock:
            while True:
                if not self._workers:
                    raise ClientAppException("every ClientApp worker process has died")
                count = len(self._workers)
                order = [self._workers[(self._next + i) % count] for i in range(count)]
                worker = min(order, key=lambda w: w.in_flight)
                if worker.in_flight < DEPTH:
                    worker.in_flight += 1
                    self._next = (self._workers.index(worker) + 1) % count
                    return worker
                self._lock.wait(timeout=1.0)

    def _give_back(self, worker: _Worker) -> None:
        with self._lock:
            worker.in_flight -= 1
            self._lock.notify_all()

    @staticmethod
    def _exchange(worker: _Worker, request: tuple[bytes, bytes]) -> tuple[str, object]:
        """Send `request` down the worker's pipe and take its reply, in the order sent: the
        worker answers its messages one by one."""
        with worker.send_lock:
            ticket = worker.sent
            worker.sent += 1
            try:
                worker.conn.send(request)
            except BaseException:
                _in_turn(worker, ticket, lambda: None)  # the later tickets' turns come
                raise
        return _in_turn(worker, ticket, worker.conn.recv)

    def _lose(self, worker: _Worker) -> str:
        """Let a dead worker go; how it ended (each message it held says the same)."""
        with self._lock:
            if worker in self._workers:  # `close` may have let every worker go already
                self._workers.remove(worker)
            if worker.ended is None:
                worker.ended = _exit_status(worker.pid)
        with worker.send_lock:  # no message is on its way down meanwhile
            worker.conn.close()
        return worker.ended


def _in_turn(worker: _Worker, ticket: int, take: Callable[[], T]) -> T:
    """`take()` once the replies to every earlier ticket of `worker` are taken; after one
    found the pipe broken, the later ones do not touch it (it is being closed)."""
    with worker.turn:
        worker.turn.wait_for(lambda: worker.taken == ticket)
    try:
        if worker.broken:
            raise EOFError("an earlier message found the worker's pipe broken")
        return take()
    except (EOFError, OSError):
        worker.broken = True
        raise
    finally:
        with worker.turn:
            worker.taken += 1
            worker.turn.notify_all()


def _gpu_share(index: int, gpus: int) -> str:
    """The GPU a worker uses: workers are spread over the GPUs in turn."""
    visible = os.environ.get(GPU_ENV)
    devices = visible.split(",") if visible else [str(i) for i in range(gpus)]
    return devices[index % len(devices)]


def _exit_status(pid: int) -> str:
    """Reap a worker that ended and say how it ended."""
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        return "already reaped"
    if os.WIFSIGNALED(status):
        return f"killed by signal {os.WTERMSIG(status)}"
    return f"exit code {os.WEXITSTATUS(status)}"


def _serve(app: ClientApp, conn: Connection) -> None:
    """The worker's loop; it exits when the engine closes the pipe (or dies, even while
    the worker is busy: its reply then has nowhere to go, or while it sends a message: the
    message ends early, an OSError)."""
    code = 0
    try:
        while True:
            try:
                request = conn.recv()
            except (EOFError, OSError):
                break
            if request[0] == "log":
                write_into(Path(request[1]))
                conn.send(("ok", None))
                continue
            message, context = _decode(request)
            try:
                reply = app(message=message, context=context)
            except Exception as ex:  # the ClientApp's own failure: the node replies with it
                traceback.print_exc()  # into the run's log, as a SuperNode's ClientApp does
                conn.send(("error", f"{type(ex).__name__}: {ex}"))
                continue
            conn.send(("ok", _encode(reply, context)))
    except BrokenPipeError:  # the engine was stopped during the message
        pass
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _encode(message: Message, context: Context) -> tuple[bytes, bytes]:
    """A message and a node's context as Flower's wire format has them (what a SuperNode
    and its ClientApp process exchange), not pickled: Flower's records hold memoryviews."""
    return (
        message_to_proto(message).SerializeToString(),
        context_to_proto(context).SerializeToString(),
    )


def _decode(encoded: tuple[bytes, bytes]) -> tuple[Message, Context]:
    message, context = ProtoMessage(), ProtoContext()
    message.ParseFromString(encoded[0])
    context.ParseFromString(encoded[1])
    return message_from_proto(message), context_from_proto(context)


class PoolBackend(Backend):
    """Flower's simulation `Backend` on a `WorkerPool` the engine forked before the run."""

    def __init__(self, pool: WorkerPool, backend_config: BackendConfig | None = None) -> None:
        super().__init__(backend_config or {})
        self.pool = pool

    def build(self, app_fn: Callable[[], ClientApp]) -> None:
        """The workers hold the ClientApp Flower would load: the engine loaded it by the same
        component reference before forking them (`load_app` caches the module)."""
        if app_fn() is not self.pool.app:
            raise ClientAppException(
                "the engine's workers run another ClientApp than the run names"
            )

    @property
    def num_workers(self) -> int:
        """Flower's engine threads: DEPTH for each worker, so each has its next message."""
        return self.pool.alive * DEPTH

    def is_worker_idle(self) -> bool:
        return self.pool.is_idle()

    def process_message(self, message: Message, context: Context) -> tuple[Message, Context]:
        return self.pool.run(message, context)

    def terminate(self) -> None:
        """The pool outlives the run: the next member of a sweep uses it."""

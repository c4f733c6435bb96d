"""ClientApp workers forked from the simulation engine: Flower's `Backend` without Ray.

Flower's simulation engine hands each message to a `Backend`; its Ray backend starts a Ray
instance (~4 s on two cores) and one fresh interpreter per actor that imports torch and the
ClientApp again (~2 s each). These workers are forked from the engine once it has imported
the ClientApp, so they are ready in milliseconds, and they serve every run of a `-m` sweep.

Each worker runs the ClientApp exactly as Flower's Ray actor does (`app(message, context)`,
the updated context sent back); a ClientApp that raises becomes Flower's ClientAppException,
which the engine turns into the node's error reply. Workers are forked before the engine
starts any thread (so no lock is copied half-held) and before anything touches CUDA (a forked
child cannot use a CUDA context its parent made), each on its share of the machine's GPUs.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, Pipe
from pathlib import Path

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


def pool_size(client_cpus: float, client_gpus: float, cpus: int, gpus: int) -> int:
    """How many ClientApps run at once: as many as the CPUs (and, when clients ask for GPU
    shares, the GPUs) hold, at least one, as Ray packs its actors."""
    size = max(int(cpus // client_cpus), 1)
    if client_gpus > 0:
        if gpus == 0:
            raise ValueError(f"runtime.client_gpus={client_gpus} but this machine has no CUDA GPU")
        size = min(size, max(int(gpus // client_gpus), 1))
    return size


@dataclass
class _Worker:
    pid: int
    conn: Connection


class WorkerPool:
    """`size` forked processes, each running `app` on the (message, context) it is sent."""

    def __init__(self, app: ClientApp, size: int, gpus: int = 0) -> None:
        self.app = app
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._workers: list[_Worker] = []
        self._lock = threading.Lock()
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
            worker = _Worker(pid, parent_end)
            self._workers.append(worker)
            self._idle.put(worker)

    @property
    def alive(self) -> int:
        with self._lock:
            return len(self._workers)

    def is_idle(self) -> bool:
        return not self._idle.empty()

    def run(self, message: Message, context: Context) -> tuple[Message, Context]:
        """Run the ClientApp on one idle worker (waits for one)."""
        worker = self._borrow()
        try:
            worker.conn.send(_encode(message, context))
            outcome, payload = worker.conn.recv()
        except (EOFError, OSError) as died:
            self._lose(worker)
            raise ClientAppException(
                f"the ClientApp worker process {worker.pid} died ({_exit_status(worker.pid)})"
            ) from died
        self._idle.put(worker)
        if outcome == "error":
            raise ClientAppException(payload)
        return _decode(payload)

    def redirect_output(self, log: Path) -> None:
        """Every worker writes its output into `log` from now on (each run its own log)."""
        for worker in self._all_idle():
            worker.conn.send(("log", str(log)))
            worker.conn.recv()
            self._idle.put(worker)

    def close(self, wait: float = 1.0) -> None:
        """End every worker: each exits when its pipe closes; one still busy after `wait`
        seconds (the run failed under it) is killed."""
        with self._lock:
            workers, self._workers = self._workers, []
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
        while True:
            if self.alive == 0:
                raise ClientAppException("every ClientApp worker process has died")
            try:
                return self._idle.get(timeout=1.0)
            except queue.Empty:
                continue

    def _all_idle(self) -> list[_Worker]:
        """Every live worker, waiting until each is idle (between runs all are)."""
        return [self._borrow() for _ in range(self.alive)]

    def _lose(self, worker: _Worker) -> None:
        with self._lock:
            if worker in self._workers:  # `close` may have let every worker go already
                self._workers.remove(worker)
        worker.conn.close()


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
        return self.pool.alive

    def is_worker_idle(self) -> bool:
        return self.pool.is_idle()

    def process_message(self, message: Message, context: Context) -> tuple[Message, Context]:
        return self.pool.run(message, context)

    def terminate(self) -> None:
        """The pool outlives the run: the next member of a sweep uses it."""

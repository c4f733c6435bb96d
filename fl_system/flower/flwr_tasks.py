"""What the ClientApp launcher relies on inside flwr 1.42 that is not public API.

The launcher acquires tasks with Flower's Runtime API client (one `AcquireTask` call claims a
task of the kinds asked for), runs each app in a forked child with Flower's own ClientApp or
ServerApp runtime, installs each FAB once per machine and hash, and answers for a ClientApp
killed by a signal at once. `problems()` names what moved in an installed flwr;
`runtime.flwr_check.check()` (which the node, the launcher and the simulation call at start-up,
and a unit test calls) includes it.
"""

from __future__ import annotations

import compileall
import contextlib
import fcntl
import hashlib
import inspect
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from queue import Queue

import flwr.cli.install as flwr_install
import flwr.supernode.nodestate.in_memory_nodestate as flwr_node_state
import flwr.supernode.runtime.run_clientapp as flwr_run_clientapp
import httpx
from flwr.common.constant import SubStatus
from flwr.proto.runtime_pb2 import AcquireTaskRequest, PushTaskOutputRequest
from flwr.supercore.constant import TaskType
from flwr.supercore.interceptors import (
    RuntimeTokenHttpInterceptor,
    RuntimeVersionHttpInterceptor,
    SuperExecAuthHttpInterceptor,
)
from flwr.supercore.logger import log as flwr_log
from flwr.supercore.logger import mirror_output_to_queue, restore_output
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.retry.retry_invoker import RetryInvoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supercore.utils import get_flwr_home
from flwr.superlink.runtime import run_serverapp as flwr_run_serverapp

InMemoryNodeState = flwr_node_state.InMemoryNodeState
CLAIM_RETRY_SECONDS = 10.0  # a Runtime API that does not answer this long is taken as gone


def problems() -> list[str]:
    """What the launcher needs that the installed flwr no longer has, one line each."""
    found: list[str] = []
    if getattr(flwr_run_clientapp, "install_from_fab", None) is not flwr_install.install_from_fab:
        found.append("run_clientapp no longer installs FABs through install_from_fab")
    expected = {"runtime_api_address", "token", "insecure", "certificates", "parent_pid"}
    for name, run in (("run_clientapp", flwr_run_clientapp.run_clientapp),
                      ("run_serverapp", flwr_run_serverapp)):  # fmt: skip
        params = set(inspect.signature(run).parameters)
        if not expected <= params:
            found.append(f"{name} lacks parameters {sorted(expected - params)}")
    for name in ("AcquireTask", "PushTaskOutput"):
        if not hasattr(RuntimeHttpClient, name):
            found.append(f"RuntimeHttpClient has no {name}")
    if "supported_task_types" not in AcquireTaskRequest.DESCRIPTOR.fields_by_name:
        found.append("AcquireTaskRequest no longer names the task types asked for")
    return found + _killed_task_problems()


@dataclass(frozen=True)
class ClaimedTask:
    """A task acquired from a Runtime API: what its app's runtime needs to run it."""

    task_id: int
    token: str
    runtime_api_address: str
    root_certificates: bytes | None = None  # the Runtime API's CA (HTTPS); None: plain HTTP
    parent_pid: int | None = None  # the app's runtime exits once this pid is gone


ACQUIRE = "/flwr.proto.Runtime/AcquireTask"  # the call a SuperExec secret signs


class TaskClaimer:
    """Claims pending app tasks through a Runtime API: a SuperNode's ClientApp tasks, or
    (`serverapp=True`) a SuperLink's ServerApp tasks.

    A SuperLink's Runtime API shares its public port with the Fleet and Control APIs (Flower
    1.42), so it is reached over HTTPS when `root_certificates` are given, and a SuperLink
    started with a SuperExec secret hands tasks only to calls signed with `auth_secret`.
    """

    def __init__(
        self,
        runtime_api_address: str,
        *,
        serverapp: bool = False,
        root_certificates: bytes | None = None,
        auth_secret: bytes | None = None,
    ) -> None:
        self.address = runtime_api_address
        self.root_certificates = root_certificates
        self.task_type = TaskType.SERVER_APP if serverapp else TaskType.CLIENT_APP
        interceptors: list[object] = [RuntimeVersionHttpInterceptor(component_name="SuperExec")]
        if auth_secret is not None:
            interceptors.append(
                SuperExecAuthHttpInterceptor(master_secret=auth_secret, protected_methods={ACQUIRE})
            )
        self.client = RuntimeHttpClient.from_server_address(
            server_address=runtime_api_address,
            insecure=root_certificates is None,
            root_certificates=root_certificates,
            interceptors=interceptors,
            retry_invoker=_bounded(make_simple_http_retry_invoker()),
        )

    def claim_pending(self) -> Iterator[ClaimedTask]:
        """Every task of this claimer's kind pending now, each acquired in one call."""
        request = AcquireTaskRequest(supported_task_types=[self.task_type.value])
        while True:
            acquired = self.client.AcquireTask(request)
            if not acquired.HasField("task") or not acquired.token:
                return
            yield ClaimedTask(
                acquired.task.task_id, acquired.token, self.address, self.root_certificates
            )

    def close(self) -> None:
        self.client.close()


def _bounded(invoker: RetryInvoker) -> RetryInvoker:
    """Flower's HTTP retries, given up after CLAIM_RETRY_SECONDS: Flower's own retry for
    ever (max_time None), so a launcher whose node vanished mid-call never came back to
    notice it was gone."""
    invoker.max_time = CLAIM_RETRY_SECONDS
    return _refusal_gives_up(invoker)


def _refusal_gives_up(invoker: RetryInvoker) -> RetryInvoker:
    """A 401 (the node does not know the token: it restarted on the same address) gives up
    the call. Flower's own retry SIGINTs its process on a 401, which in a launcher serving
    every node of the federation stopped them all because one node was restarted."""
    flower = invoker.should_giveup

    def give_up(err: Exception) -> bool:
        if isinstance(err, httpx.HTTPStatusError) and err.response.status_code == 401:
            return True
        return flower(err) if flower is not None else False

    invoker.should_giveup = give_up
    return invoker


KILLED = "ClientApp process killed"  # how the launcher's report on a dead child begins


def report_killed(spec: ClaimedTask, how: str) -> bool:
    """Finish a task whose ClientApp was killed (it pushed nothing), with its token, so that
    its node replies with an error at once (`reply_at_once_when_killed`); False if the node
    could not be told (it is gone too)."""
    retry = _refusal_gives_up(make_simple_http_retry_invoker())
    retry.max_tries = 1  # a node that does not answer at once is gone
    client = RuntimeHttpClient.from_server_address(
        server_address=spec.runtime_api_address,
        insecure=True,
        root_certificates=None,
        interceptors=[
            RuntimeVersionHttpInterceptor(component_name="flwr-clientapp"),
            RuntimeTokenHttpInterceptor(spec.token),
        ],
        retry_invoker=retry,
    )
    request = PushTaskOutputRequest(sub_status=SubStatus.FAILED, details=f"{KILLED} by {how}")
    try:
        client.PushTaskOutput(request)
        return True
    except Exception:  # the node is gone or refused: Flower's token expiry remains
        return False
    finally:
        client.close()


def _killed_task_problems() -> list[str]:
    found = [
        f"InMemoryNodeState has no {name}"
        for name in ("finish_task", "get_tasks", "_store_error_replies")
        if not hasattr(InMemoryNodeState, name)
    ]
    if not hasattr(flwr_node_state, "CLIENT_APP_CRASHED_ERROR"):
        found.append("the SuperNode's state no longer has CLIENT_APP_CRASHED_ERROR")
    elif "error" not in inspect.signature(InMemoryNodeState._store_error_replies).parameters:
        found.append("InMemoryNodeState._store_error_replies no longer takes the error")
    return found


def reply_at_once_when_killed() -> None:
    """In the SuperNode: a task finished with the launcher's KILLED report gets the error
    reply Flower gives when a task's heartbeats stop (CLIENT_APP_CRASHED), now instead of
    once its token expires, for every message of its run not yet answered.

    Flower 1.42 does this for a failed AgentApp task (`InMemoryNodeState.finish_task`) but not
    for a failed ClientApp task: a fix Flower could take.
    """
    finish = InMemoryNodeState.finish_task

    def finish_task(self: InMemoryNodeState, task_id: int, sub_status: str, details: str) -> bool:
        finished = finish(self, task_id, sub_status, details)
        if finished and details.startswith(KILLED):
            tasks = self.get_tasks(task_ids=[task_id])
            if tasks and tasks[0].type == TaskType.CLIENT_APP:
                self._store_error_replies(
                    {tasks[0].run_id}, flwr_node_state.CLIENT_APP_CRASHED_ERROR
                )
        return finished

    InMemoryNodeState.finish_task = finish_task  # type: ignore[method-assign]


def run_serverapp(spec: ClaimedTask) -> None:
    """Flower's ServerApp runtime for one claimed task, as `flwr-serverapp` runs it: its
    output mirrored to the queue that ships it to the SuperLink (`flwr run --stream`)."""
    log_queue: Queue[str | None] = Queue()
    mirror_output_to_queue(log_queue)
    flwr_log(logging.INFO, "Start `flwr-serverapp` process")
    try:
        flwr_run_serverapp(
            runtime_api_address=spec.runtime_api_address,
            log_queue=log_queue,
            token=spec.token,
            insecure=spec.root_certificates is None,
            certificates=spec.root_certificates,
            parent_pid=spec.parent_pid,
            runtime_dependency_install=False,
        )
    finally:
        restore_output()


def run_clientapp(spec: ClaimedTask) -> None:
    """Flower's ClientApp runtime for one claimed task (ends with Flower's SystemExit)."""
    flwr_run_clientapp.run_clientapp(
        runtime_api_address=spec.runtime_api_address,
        token=spec.token,
        insecure=True,
        certificates=None,
        parent_pid=spec.parent_pid,
        runtime_dependency_install=False,
    )


def install_fab_cache() -> None:
    """Install (and byte-compile) each FAB once per FLWR_HOME and hash; ClientApps reuse it.

    Flower unzips and re-verifies the FAB for every message, and two ClientApps installing
    the same FAB at once can see a half-copied directory. A lock and a marker written after
    a complete install fix both.
    """
    install = flwr_install.install_from_fab

    def cached(fab_file: Path | bytes, install_dir: Path | None = None, **kwargs: object) -> Path:
        content = fab_file if isinstance(fab_file, bytes) else Path(fab_file).read_bytes()
        marker = (
            (install_dir or get_flwr_home())
            / "apps"
            / (f".installed-{hashlib.sha256(content).hexdigest()}")
        )
        if (path := _installed(marker)) is not None:
            return path
        marker.parent.mkdir(parents=True, exist_ok=True)
        with _locked(marker.with_suffix(".lock")):
            if (path := _installed(marker)) is not None:
                return path
            path = install(fab_file, install_dir, **kwargs)
            # Bytecode once here, so ClientApps load it (even with PYTHONDONTWRITEBYTECODE set).
            compileall.compile_dir(str(path), quiet=1)
            tmp = marker.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(str(path))
            os.replace(tmp, marker)
            return path

    flwr_run_clientapp.install_from_fab = cached


def on_fab_installed(callback: Callable[[Path], None]) -> None:
    """In a ClientApp task: call `callback` with the installed FAB's directory, before the app
    is loaded from it."""
    install = flwr_run_clientapp.install_from_fab

    def installed(*args: object, **kwargs: object) -> Path:
        path = Path(install(*args, **kwargs))
        callback(path)
        return path

    flwr_run_clientapp.install_from_fab = installed


def _installed(marker: Path) -> Path | None:
    with contextlib.suppress(OSError):
        path = Path(marker.read_text())
        if path.is_dir():
            return path
    return None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)

"""The ClientApp launcher: one long-lived process per SuperNode that forks a child per task.

Flower starts a fresh `flwr-clientapp` interpreter for every message, which imports torch and
Flower again (seconds of CPU each, ten at once on a small machine). This process imports them
once, waits for the SuperNode to say a message arrived (a byte on the wake pipe, with a
fallback poll), claims the task through the Runtime API and forks a child that runs Flower's
own ClientApp runtime with the task's token. The parent never runs a torch op or touches CUDA,
so a child may use the GPU.

    python -m fl_system.supernode.launcher --runtime-api-address HOST:PORT --wake-fd FD
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fl_system.launch.processes import alive

if TYPE_CHECKING:
    from flwr.supercore.superexec.executor import ExecutionSpec

# Third-party modules every ClientApp of this project imports (torch._dynamo comes with the
# first optimiser). Never our own packages: a child must import those from the run's FAB.
PRELOAD = (
    "torch",
    "torch._dynamo",
    "torch.optim",
    "numpy",
    "omegaconf",
    "hydra.utils",
    "yaml",
    "tqdm",
    "flwr.app",
    "flwr.clientapp",
)
# The app's own packages: the launcher imports fl_system for its hooks, and a child drops them
# so that the ClientApp imports the FAB's copy, exactly as a fresh flwr-clientapp would.
APP_PACKAGES = ("fl_system", "client_app", "server_app")
FALLBACK_POLL_SECONDS = 1.0  # look for tasks even without a wake-up (e.g. one sent at start-up)


def say(text: str) -> None:
    print(f"[launcher {os.getpid()}] {text}", file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fl_system.supernode.launcher")
    parser.add_argument("--runtime-api-address", required=True)
    parser.add_argument("--wake-fd", type=int, required=True, help="readable end of the pipe")
    parser.add_argument("--node-pid", type=int, required=True, help="exit when it is gone")
    return parser.parse_args(argv)


class Launcher:
    """Claims tasks and forks children; reaps them and reports those that died abnormally."""

    def __init__(self, runtime_api_address: str, wake_fd: int, node_pid: int) -> None:
        from fl_system import flwr_hooks

        self.hooks = flwr_hooks
        self.claimer = flwr_hooks.TaskClaimer(runtime_api_address)
        self.wake_fd = wake_fd
        self.node_pid = node_pid
        self.children: dict[int, tuple[int, float]] = {}  # pid -> (task id, start time)
        self.signal_r, signal_w = os.pipe()
        os.set_blocking(signal_w, False)
        signal.set_wakeup_fd(signal_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the fd

    def serve(self) -> None:
        try:
            while self._wait_for_news():
                self._reap()
                for spec in self.claimer.claim_pending():
                    self._fork(spec)
        finally:
            self.claimer.close()
            self._reap()

    def _wait_for_news(self) -> bool:
        """Block until a wake-up, a child's exit or the fallback poll; False once the node left."""
        ready, _, _ = select.select([self.wake_fd, self.signal_r], [], [], FALLBACK_POLL_SECONDS)
        for fd in ready:
            if not os.read(fd, 4096) and fd == self.wake_fd:
                return False  # the SuperNode closed its end: it is gone
        return alive(self.node_pid)

    def _fork(self, spec: ExecutionSpec) -> None:
        pid = os.fork()
        if pid == 0:  # the child never returns
            _run_child(self, spec)
        self.children[pid] = (spec.task_id, time.monotonic())

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            task_id, start = self.children.pop(pid, (None, time.monotonic()))
            seconds = time.monotonic() - start
            took = f"ClientApp task {task_id} (pid {pid}) ended after {seconds:.2f} s"
            if os.WIFSIGNALED(status):
                say(
                    f"ERROR: {took} with {_describe(status)}: it sent no reply, so the SuperNode "
                    "sends an error reply once the task's heartbeat expires (about 60 s)"
                )
            elif os.WEXITSTATUS(status) != 0:
                say(f"ERROR: {took} with {_describe(status)} (its error reply went to the server)")
            else:
                say(took)


def _run_child(launcher: Launcher, spec: ExecutionSpec) -> None:
    """In the forked child: Flower's ClientApp runtime for this task, then exit."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        os.close(launcher.wake_fd)
        os.close(launcher.signal_r)
        for name in [m for m in sys.modules if m.split(".")[0] in APP_PACKAGES]:
            del sys.modules[name]
        launcher.hooks.run_clientapp(spec)
        code = 0
    except SystemExit as done:  # Flower's runtime ends with flwr_exit
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit code {os.WEXITSTATUS(status)}"


def preload() -> float:
    """Import what every ClientApp needs; returns the seconds it took."""
    start = time.perf_counter()
    for name in PRELOAD:
        importlib.import_module(name)
    return time.perf_counter() - start


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)  # telemetry is off in the environment fl-supernode passes on
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    try:
        seconds = preload()
        from fl_system import flwr_hooks

        flwr_hooks.check()
        flwr_hooks.install_fab_cache()
        launcher = Launcher(args.runtime_api_address, args.wake_fd, args.node_pid)
    except Exception as err:  # one line for the node's log, then exit
        say(f"ERROR: cannot start: {err}")
        return 1
    say(f"ready: preloaded {len(PRELOAD)} modules in {seconds:.1f} s")
    launcher.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())

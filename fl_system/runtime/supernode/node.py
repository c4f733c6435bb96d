"""`fl-supernode`: Flower's SuperNode with fast ClientApp launches and a federation's polling.

Takes `flower-supernode`'s arguments and runs Flower's SuperNode in this process with
`--isolation process`, next to our ClientApp launcher (a child process that pre-imports torch
and forks one child per message; with FL_LAUNCHER_SOCKET set, the one launcher fl-run started
for every node of its local federation). The SuperNode wakes the launcher when a message
arrives, and pulls the SuperLink by a `PollSchedule` (FL_NODE_POLL_ACTIVE,
FL_NODE_POLL_IDLE, FL_NODE_ACTIVE_WINDOW, FL_NODE_REPLY_POLL) instead of every 3 s, or, with
FL_NODE_WAKE_DIR (its SuperLink on this machine), when woken and every second besides. It
promises a heartbeat every FL_NODE_HEARTBEAT seconds (unset: Flower's 30; below 10 needs
fl-superlink). If the launcher dies, the node logs why and stops (exit 1), so the SuperLink
answers the server with "node unavailable" instead of the round waiting forever. With
FL_SUPERVISOR_PID (fl-client sets it to its own pid) the node also stops when that parent is
gone: a SIGKILLed fl-client leaves no SuperNode training on unsupervised, holding its key.
With FL_NODE_TRUST (fl-client --trust) it runs only apps signed by those operators' keys
(`site_checks`), with FL_NODE_POLICY (fl-client --policy) only runs its site's policy allows
(`site_policy`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from fl_system.flower.wakeups import NODE_WAKE_DIR_ENV
from fl_system.runtime.supernode.launcher import SOCKET_ENV
from fl_system.runtime.supernode.polling import PollSchedule, Wakeups, env_seconds

LAUNCHER_DIED = 1
HEARTBEAT_ENV = "FL_NODE_HEARTBEAT"
SUPERVISOR_ENV = "FL_SUPERVISOR_PID"  # the parent this node lives for (fl-client)
SUPERVISOR_POLL_SECONDS = 1.0


def say(text: str) -> None:
    print(f"fl-supernode: {text}", file=sys.stderr, flush=True)


def runtime_api_address(flower_args: Sequence[str]) -> str:
    """Where the SuperNode serves its Runtime API (flower-supernode's --host and --port)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9094)
    parser.add_argument("--isolation")
    known, _ = parser.parse_known_args(list(flower_args))
    if known.isolation is not None:
        raise ValueError("fl-supernode chooses --isolation itself; leave it out")
    host = f"[{known.host}]" if ":" in known.host else known.host
    return f"{host}:{known.port}"


class LauncherWatch:
    """The launcher child, and a thread that stops this node if it dies unexpectedly."""

    def __init__(self, address: str) -> None:
        read_end, self.wake = os.pipe()
        os.set_blocking(self.wake, False)
        self.proc = subprocess.Popen(
            [
                sys.executable, "-m", "fl_system.runtime.supernode.launcher",
                "--runtime-api-address", address,
                "--wake-fd", str(read_end),
                "--node-pid", str(os.getpid()),
            ],
            pass_fds=[read_end],
        )  # fmt: skip
        os.close(read_end)
        self.stopping = False
        self.died = False
        threading.Thread(target=self._watch, name="launcher-watch", daemon=True).start()

    def notify(self) -> None:
        """A message was stored: the launcher should claim it now."""
        # BlockingIOError: already woken; BrokenPipeError: gone (the watch thread handles it)
        with contextlib.suppress(BlockingIOError, BrokenPipeError):
            os.write(self.wake, b".")

    def _watch(self) -> None:
        code = self.proc.wait()
        if self.stopping:
            return
        self.died = True
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        say(
            f"error: the ClientApp launcher (pid {self.proc.pid}) ended with {how}; this "
            "SuperNode stops so that the SuperLink reports it unavailable"
        )
        os.kill(os.getpid(), signal.SIGTERM)  # Flower's handler leaves the federation cleanly

    def stop(self) -> None:
        self.stopping = True
        os.close(self.wake)  # a serving launcher exits when its end of the pipe closes
        # one still importing (its first seconds) reads no pipe: its SIGTERM handler exits
        # there, and a serving one's only ends its loop, as the closed pipe does
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def watch_supervisor(pid: int, interval: float = SUPERVISOR_POLL_SECONDS) -> None:
    """Stop this node (cleanly: Flower's SIGTERM handler leaves the federation) once its
    parent `pid` is gone, however it ended; a node that fl-client did not start is unwatched."""
    if os.getppid() != pid:
        say(f"warning: {SUPERVISOR_ENV}={pid} is not this node's parent; not watched")
        return

    def watch() -> None:
        while os.getppid() == pid:
            time.sleep(interval)
        with contextlib.suppress(OSError):  # its output went to the parent: a broken pipe
            say(f"its fl-client (pid {pid}) is gone: this SuperNode stops")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="supervisor-watch", daemon=True).start()


INTRODUCE_RETRY_SECONDS = 0.2  # how soon a node retries introducing itself (no launcher yet)


class SharedLauncher:
    """The launcher every SuperNode of a local federation shares (fl-run started it): woken
    by a datagram with this node's pid and Runtime API address, which also introduces the
    node. If it dies, fl-run ends the run; this node only stops calling it.

    The introduction must arrive: the launcher polls only nodes it knows, so a node whose
    introduction was dropped was never served (its handshake waited for ever). A thread
    sends it, waiting for the launcher's socket and for room in its queue
    (net.unix.max_dgram_qlen, 10 by default; fifty nodes starting while the launcher forks
    is more). The wake-ups after it may be dropped: the launcher's fallback poll serves a
    node it knows."""

    died = False

    def __init__(self, socket_path: str, address: str) -> None:
        self.socket_path = socket_path
        self.hello = f"{os.getpid()} {address}".encode()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        self.introduced = threading.Event()
        self._closed = threading.Event()
        introduce = threading.Thread(target=self._introduce, name="introduction", daemon=True)
        introduce.start()

    def _introduce(self) -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:  # blocks for room
            while not self._closed.is_set():
                try:
                    sock.sendto(self.hello, self.socket_path)
                except OSError:  # the launcher's socket is not there yet
                    self._closed.wait(INTRODUCE_RETRY_SECONDS)
                    continue
                self.introduced.set()
                return

    def notify(self) -> None:
        # OSError: the launcher is not there (yet, or any more), or its queue is full; its
        # fallback poll (for a node it knows) and the next notification cover the first,
        # fl-run the second
        with contextlib.suppress(OSError):
            self.sock.sendto(self.hello, self.socket_path)

    def stop(self) -> None:
        self._closed.set()
        self.sock.close()


def main(argv: Sequence[str] | None = None) -> int:
    flower_args = list(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    try:
        from fl_system.flower import (
            app_checks,
            flwr_hooks,
            flwr_tasks,
            object_pulls,
            raise_if,
            stranded_replies,
            telemetry_off,
        )
        from fl_system.runtime import flwr_check
        from fl_system.runtime.supernode.site_env import POLICY_ENV, TRUST_ENV

        flwr_check.check()
        telemetry_off.install()
        checked = bool(os.environ.get(TRUST_ENV) or os.environ.get(POLICY_ENV))
        if checked:  # imported only then: every node's start-up would pay for them
            from fl_system.runtime.supernode import site_checks, site_policy

            trusted, policy = site_checks.from_env(), site_policy.from_env()
            raise_if(app_checks.problems())
        schedule = PollSchedule.from_env()
        if (heartbeat := env_seconds(HEARTBEAT_ENV)) is not None:
            flwr_hooks.set_node_heartbeat(heartbeat)
        address = runtime_api_address(flower_args)
    except (ValueError, RuntimeError) as err:
        say(f"error: {err}")
        return 2
    if supervisor := os.environ.get(SUPERVISOR_ENV):
        watch_supervisor(int(supervisor))
    shared = os.environ.get(SOCKET_ENV)
    watch = SharedLauncher(shared, address) if shared else LauncherWatch(address)
    wake_dir = os.environ.get(NODE_WAKE_DIR_ENV)  # the SuperLink is on this machine
    wakeups = Wakeups(wake_dir) if wake_dir else None
    flwr_hooks.install_poll_schedule(schedule, on_message=watch.notify, wakeups=wakeups)
    stranded_replies.install()
    if checked:  # outside stranded_replies: a refusal is no message it tracks
        check = None if policy is None else site_policy.policy_check(policy)
        app_checks.install(site_checks.app_check(trusted, check, say))
    object_pulls.retry_sooner("supernode")
    flwr_tasks.reply_at_once_when_killed()
    flwr_hooks.say_when_refused()
    code: int | str | None = 0
    try:
        flwr_hooks.run_supernode([*flower_args, "--isolation", flwr_hooks.ISOLATION])
    except SystemExit as done:
        code = done.code
    finally:
        watch.stop()
        if wakeups is not None:
            wakeups.close()
    if watch.died:
        return LAUNCHER_DIED
    return code if isinstance(code, int) else (0 if code is None else 1)


if __name__ == "__main__":
    sys.exit(main())

"""fl-client's backstop for a SuperNode that stops noticing its server."""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable

from fl_system.runtime.connection_checks import reachable


class ServerWatch:
    """A backstop for a SuperNode that stops noticing its server: a call the stopping server
    cancelled is not retried by Flower, and the node then waits forever. After an error line
    (`arm`), the server's port is probed; if it stays closed for `limit` seconds the SuperNode
    is stopped (`stop(proc)`) and `lost` is set, and the first successful probe disarms the
    watch again."""

    def __init__(
        self,
        host: str,
        port: int,
        limit: float,
        proc: subprocess.Popen,
        stop: Callable[[subprocess.Popen], None],
        interval: float = 2.0,
    ) -> None:
        self.lost = False
        self.done = threading.Event()
        self._armed = threading.Event()
        self._stop = stop
        self._args = (host, port, limit, proc, interval)
        threading.Thread(target=self._watch, name="server-watch", daemon=True).start()

    def arm(self) -> None:
        self._armed.set()

    def _watch(self) -> None:
        host, port, limit, proc, interval = self._args
        down_since: float | None = None
        while not self.done.is_set() and proc.poll() is None:
            if not self._armed.is_set():
                self._armed.wait(interval)
                continue
            if reachable(host, port):
                down_since = None
                self._armed.clear()
            elif down_since is None:
                down_since = time.monotonic()
            elif time.monotonic() - down_since >= limit:
                self.lost = True
                self._stop(proc)
                return
            self.done.wait(interval)

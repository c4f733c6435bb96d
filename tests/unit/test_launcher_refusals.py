"""A launcher serves every node of a local federation: one node's refusal (HTTP 401, as from a
node restarted on the same address, which no longer knows a task's token) must give up that
call, not stop the launcher. Flower's retry SIGINTs its own process on a 401."""

from __future__ import annotations

import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CALLS = """
import sys
from fl_system.flower import flwr_tasks
address = sys.argv[1]
spec = flwr_tasks.ClaimedTask(1, "token", address)
print("reported", flwr_tasks.report_killed(spec, "signal SIGKILL"))
claimer = flwr_tasks.TaskClaimer(address)
try:
    list(claimer.claim_pending())
except Exception as err:
    print("claim gave up:", type(err).__name__)
print("still here")
"""


class _Refuses(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(401)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        """Quiet."""


def test_a_node_that_refuses_a_token_does_not_stop_the_process_that_asked() -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        done = subprocess.run(
            [sys.executable, "-c", CALLS, address], capture_output=True, text=True, timeout=60
        )
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines == ["reported False", "claim gave up: HTTPStatusError", "still here"], done.stdout

"""A SuperNode of a local federation introduces itself to the shared ClientApp launcher with a
datagram. When the launcher's queue is full (twenty nodes starting together, net.unix.
max_dgram_qlen 10 by default), the introduction waits for room instead of being dropped: a node
the launcher never heard of was never polled, and its handshake waited for ever."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

from fl_system.runtime.supernode.node import SharedLauncher


def test_an_introduction_to_a_full_queue_waits_for_room(tmp_path: Path) -> None:
    path = str(tmp_path / "launcher.sock")
    launcher = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    launcher.bind(path)
    filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    filler.setblocking(False)
    queued = 0
    try:
        while True:  # as many other nodes' wake-ups as the queue holds
            filler.sendto(b"1 other", path)
            queued += 1
    except BlockingIOError:
        pass
    read: list[bytes] = []

    def drain_later() -> None:  # the launcher finishes its imports, then reads
        time.sleep(0.3)
        launcher.settimeout(2.0)
        for _ in range(queued + 1):
            read.append(launcher.recv(1024))

    reader = threading.Thread(target=drain_later)
    reader.start()
    node = SharedLauncher(path, "127.0.0.1:9094")
    reader.join(timeout=10)
    node.stop()
    launcher.close()
    filler.close()
    assert queued >= 1
    assert read[-1] == f"{os.getpid()} 127.0.0.1:9094".encode()

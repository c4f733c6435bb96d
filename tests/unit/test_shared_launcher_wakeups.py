"""A SuperNode of a local federation introduces itself to the shared ClientApp launcher with a
datagram, and the launcher serves only nodes it knows. The introduction waits for room when the
launcher's queue is full (twenty nodes starting together, net.unix.max_dgram_qlen 10 by default)
and for the launcher's socket when it is not there yet, instead of being dropped: a node the
launcher never heard of was never polled, and its handshake waited for ever."""

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
    assert node.introduced.wait(timeout=10)
    reader.join(timeout=10)
    node.stop()
    launcher.close()
    filler.close()
    assert queued >= 1
    assert read[-1] == f"{os.getpid()} 127.0.0.1:9094".encode()


def test_an_introduction_waits_for_the_launchers_socket(tmp_path: Path) -> None:
    path = str(tmp_path / "launcher.sock")
    node = SharedLauncher(path, "127.0.0.1:9095")
    time.sleep(0.5)  # the launcher is still importing: no socket yet
    assert not node.introduced.is_set()
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as launcher:
        launcher.bind(path)
        launcher.settimeout(5.0)
        assert launcher.recv(1024) == f"{os.getpid()} 127.0.0.1:9095".encode()
    assert node.introduced.wait(timeout=5)
    node.stop()

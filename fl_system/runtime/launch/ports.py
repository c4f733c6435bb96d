"""Ports for the processes a run starts: free ones to listen on, and whether one is open."""

from __future__ import annotations

import contextlib
import random
import socket
from pathlib import Path

_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
# Listening ports are drawn from here up to the ephemeral range: above Ray's defaults (its
# client server 10001 and worker ports 10002-19999, which a head given a port among them
# refuses to start with).
_LISTEN_FLOOR = 20000


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now, drawn below the range the OS hands outgoing
    connections: a port from that range can be taken by a connection made before our process
    binds it (50 SuperNodes make enough of them). Drawn from OS entropy, so parallel runs
    differ whatever their seeds."""
    draw = random.SystemRandom()
    low = _ephemeral_start()
    for _ in range(100 if low > _LISTEN_FLOOR else 0):
        port = draw.randrange(_LISTEN_FLOOR, low)
        with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, port))
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # the OS's pick
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _ephemeral_start() -> int:
    """The first port of the OS's range for outgoing connections (Linux's default 32768)."""
    try:
        return int(_EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_open(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0

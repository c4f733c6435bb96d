"""Listening ports for a run's processes come from below the OS's range for outgoing
connections: a port from that range can be taken by a connection before the process that
was given it binds it (a SuperNode then fails 'address already in use', every restart too)."""

from __future__ import annotations

import socket
from pathlib import Path

from fl_system.runtime.launch.ports import free_port


def test_ports_are_free_and_below_the_range_of_outgoing_connections() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(50)]
    assert all(20000 <= p < low for p in ports), ports  # above Ray's own ports too
    assert len(set(ports)) >= 45  # drawn, not handed out in order: parallel runs differ
    for port in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))


def test_a_port_something_listens_on_is_not_given() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("127.0.0.1", free_port()))
        held.listen()
        taken = held.getsockname()[1]
        assert taken not in {free_port() for _ in range(2000)}

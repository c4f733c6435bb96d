"""Machines on one box: network namespaces joined by a bridge, all removed afterwards.

Each "host" is a namespace with its own loopback and one veth into a bridge that lives in
a namespace of its own, so nothing is added to the machine's own network: every address
exists only inside namespaces made here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    probe = f"fls-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "delete", probe], capture_output=True)
    return None


@dataclass(frozen=True)
class Host:
    name: str
    namespace: str
    address: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside this host's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@contextmanager
def hosts(names: Sequence[str], subnet: str = "10.77.0") -> Iterator[dict[str, Host]]:
    """Namespaced hosts `names`, addresses subnet.1, .2, ... on one bridge."""
    tag = uuid.uuid4().hex[:6]
    bridge_ns = f"fls-{tag}-lan"
    made: list[str] = []
    try:
        _ip("netns", "add", bridge_ns)
        made.append(bridge_ns)
        _ip("-n", bridge_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", bridge_ns, "link", "set", "br0", "up")
        result: dict[str, Host] = {}
        for i, name in enumerate(names, start=1):
            ns = f"fls-{tag}-{i}"
            _ip("netns", "add", ns)
            made.append(ns)
            # the veth is created inside the host namespace, its peer moved to the bridge's
            _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", f"p{i}")
            _ip("-n", ns, "link", "set", f"p{i}", "netns", bridge_ns)
            _ip("-n", bridge_ns, "link", "set", f"p{i}", "master", "br0")
            _ip("-n", bridge_ns, "link", "set", f"p{i}", "up")
            address = f"{subnet}.{i}"
            _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            result[name] = Host(name, ns, address)
        yield result
    finally:
        for ns in reversed(made):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)

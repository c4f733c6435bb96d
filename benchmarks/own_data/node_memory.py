"""Peak resident memory of each node of a runtime=local federation, sampled from /proc.

A node's processes are its `fl-supernode` and the ClientApp children the launcher forks for
it (titled `fl_system clientapp task ... (for pid <its supernode>)`); the worker processes a
ClientApp forks to decode image files at its first read carry its title and are counted
apart. RSS counts the pages a forked child shares with its parent in full, so the sums are
upper bounds.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.harness.process_tree import tree

_FOR = re.compile(r"fl_system clientapp task \S+ \(for pid (\d+)\)")


def _rss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


@dataclass
class NodePeaks:
    """Per supernode pid: its own peak RSS, its ClientApps' peak, and the peak of the two
    together at one sample; and the shared launcher's peak."""

    supernode: dict[int, int] = field(default_factory=dict)
    clientapp: dict[int, int] = field(default_factory=dict)
    together: dict[int, int] = field(default_factory=dict)
    decoders: dict[int, int] = field(default_factory=dict)  # first read's decode workers
    launcher: int = 0


class NodeMemory:
    """Samples the process tree under `root` every `interval` seconds until `stop`."""

    def __init__(self, root: int, interval: float = 0.2) -> None:
        self.root = root
        self.interval = interval
        self.peaks = NodePeaks()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval)

    def _sample(self) -> None:
        nodes: dict[int, int] = {}
        apps: dict[int, int] = {}
        decoders: dict[int, int] = {}
        pids = tree(self.root)
        titles = {pid: _cmdline(pid) for pid in pids}
        for pid, cmd in titles.items():
            if "fl-supernode" in cmd:
                nodes[pid] = _rss(pid)
            elif (found := _FOR.search(cmd)) is not None:
                owner = int(found.group(1))
                worker = _FOR.search(titles.get(_parent(pid), "")) is not None
                counts = decoders if worker else apps
                counts[owner] = counts.get(owner, 0) + _rss(pid)
            elif "fl_system.runtime.supernode.launcher" in cmd:
                self.peaks.launcher = max(self.peaks.launcher, _rss(pid))
        p = self.peaks
        for node, rss in nodes.items():
            p.supernode[node] = max(p.supernode.get(node, 0), rss)
            p.clientapp[node] = max(p.clientapp.get(node, 0), apps.get(node, 0))
            p.together[node] = max(p.together.get(node, 0), rss + apps.get(node, 0))
            p.decoders[node] = max(p.decoders.get(node, 0), decoders.get(node, 0))

    def stop(self) -> NodePeaks:
        self._stop.set()
        self._thread.join()
        return self.peaks

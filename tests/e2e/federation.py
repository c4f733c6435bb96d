"""A federation across "machines" for the e2e tests: fl-server in one network namespace,
fl-clients in others, TLS and SuperNode authentication on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from fl_system.deploy import certs
from fl_system.learning.devices import thread_env
from fl_system.records.results import read_rows
from fl_system.runtime.launch.processes import ProcessGroup, alive
from tests.e2e.netns import Host, hosts
from tests.node_polling import SUITE_POLLING

BIN = Path(sys.executable).parent
PORT = 9092  # the SuperLink's one port: SuperNodes and the Control API


@dataclass
class Federation:
    lan: dict[str, Host]
    certs: Path
    stranger: Path  # material of another federation: its CA and a key nobody registered
    work: Path
    env: dict[str, str]
    procs: ProcessGroup

    @property
    def server(self) -> str:
        return f"{self.lan['server'].address}:{PORT}"

    def client(
        self,
        host: str,
        partition: int,
        *extra: str,
        key: Path | None = None,
        num_partitions: int = 2,
    ):
        """fl-client in `host`'s namespace, in the background; its output goes to a log."""
        key = key or self.certs / certs.supernode_key_names(partition)[0]
        log = self.work / f"{host}-{partition}-{len(self.procs.procs)}.log"
        cmd = [
            str(BIN / "fl-client"),
            "--server",
            self.server,
            "--partition-id",
            str(partition),
            "--num-partitions",
            str(num_partitions),
            "--root-certificates",
            str(self.certs / certs.CA_CERT),
            "--auth-key",
            str(key),
            *extra,
        ]
        proc = self.procs.start(f"client {host}", self.lan[host].command(cmd), log, self.env)
        return proc, log

    def tool(self, host: str, name: str, *args: str) -> subprocess.CompletedProcess:
        """One of our commands in `host`'s namespace, which must succeed."""
        done = self.run_in(host, [str(BIN / name), *args], timeout=60)
        assert done.returncode == 0, done.stdout + done.stderr
        return done

    @property
    def control(self) -> list[str]:
        """fl-server register|unregister|nodes' arguments for this federation (as its admin)."""
        return [*self.connection, "--credential", str(self.certs / certs.ADMIN_KEY)]

    @property
    def connection(self) -> list[str]:
        """How a host reaches this federation's Control API, with no credential."""
        return ["--certs", str(self.certs), "--control", self.server]

    def run_in(self, host: str, argv: list[str], timeout: float) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.lan[host].command(argv),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


@contextmanager
def started_federation(work: Path, clients: Sequence[str], keys: int = 5) -> Iterator[Federation]:
    """fl-server on host "server" (keys supernode-0..keys-1 registered, --enroll-dir
    work/enroll) and empty hosts `clients`; every process started through it is gone
    afterwards."""
    # One torch/BLAS thread per process: the "machines" share this one's cores.
    env = {**os.environ, **thread_env(1), **SUITE_POLLING}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["FL_CACHE_DIR"] = str(work / "node-cache")
    env["FL_STATE_DIR"] = str(work / "client-state")
    procs = ProcessGroup()
    with hosts(["server", *clients]) as lan:
        material, stranger = work / "certs", work / "stranger"
        certs.generate(
            material, server_names=[], server_ips=[lan["server"].address], supernodes=keys
        )
        certs.generate(stranger, server_names=["elsewhere"], supernodes=1)
        fed = Federation(lan, material, stranger, work, env, procs)
        try:
            server_log = work / "server.log"
            cmd = [
                str(BIN / "fl-server"), "--certs", str(material),
                "--authorized-keys", str(material),
                "--state-dir", str(work / "superlink-state"), "--enroll-dir", str(work / "enroll"),
            ]  # fmt: skip
            procs.start("fl-server", lan["server"].command(cmd), server_log, env)
            assert wait_for_text(server_log, "SuperLink ready", 90), server_log.read_text()
            yield fed
        finally:
            procs.stop()
            assert [p.pid for _, p in procs.procs if alive(p.pid)] == []


def wait_for_text(log: Path, text: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return True
        time.sleep(0.5)
    return False


def wait_for_rounds(
    run_dir: Path,
    count: int,
    where: Callable[[dict], bool] = lambda row: True,
    timeout: float = 300,
) -> int:
    """Wait until `count` rows of metrics.csv satisfy `where`; the rows written by then."""
    deadline = time.monotonic() + timeout
    while True:
        path = run_dir / "metrics.csv"
        rows = read_rows(path) if path.exists() else []
        if sum(1 for row in rows if where(row)) >= count:
            return len(rows)
        assert time.monotonic() < deadline, f"{count} rounds not reached in {timeout} s"
        time.sleep(0.3)

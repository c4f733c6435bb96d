"""runtime=remote: submit to a SuperLink that already runs elsewhere."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from omegaconf import DictConfig

from fl_system.access.tokens import RUN_LIFETIME, load_credential, mint
from fl_system.flower import FlwrInternalsChanged, flwr_credentials, raise_if
from fl_system.flower.flwr_credentials import store_token
from fl_system.records.run_dir import RunPaths
from fl_system.runtime.connection_checks import (
    DeployError,
    check_tls,
    is_loopback,
    split_address,
    wait_reachable,
)
from fl_system.runtime.launch import LaunchError
from fl_system.runtime.launch.processes import ProcessGroup, tool_env
from fl_system.runtime.launch.submit import Connection, submit_and_follow


class RemoteRuntime:
    """`flwr run` against an existing SuperLink's Control API (TLS unless told otherwise).

    Before submitting, the Control API must answer within `connect_timeout` seconds (with a
    countdown) and, with TLS, present a certificate that `root_certificates` verifies.
    Stopping fl-run stops the run on the server, unless `detach` leaves it running there.
    `credential` is the operator's key (NAME.key from `fl-certs --operator-key NAME`): each
    Control API call carries a token it signs, as a SuperLink with operators requires, and it
    signs the app, as nodes that trust their operators' apps only require.
    """

    def __init__(
        self,
        *,
        address: str,
        root_certificates: str | None = None,
        insecure: bool = False,
        connect_timeout: float = 30,
        detach: bool = False,
        credential: str | None = None,
    ) -> None:
        try:
            self.host, self.port = split_address(address, "runtime.address")
        except DeployError as err:
            raise LaunchError(str(err)) from None
        if root_certificates and not Path(root_certificates).is_file():
            raise LaunchError(f"runtime.root_certificates: no file at {root_certificates}")
        if insecure and root_certificates:
            raise LaunchError("runtime.insecure=true and runtime.root_certificates contradict")
        self.connection = Connection(address, insecure, root_certificates)
        self.connect_timeout = connect_timeout
        if not isinstance(detach, bool):
            raise LaunchError(f"runtime.detach must be true or false, got {detach!r}")
        self.detach = detach
        self.credential = None
        if credential:
            try:
                self.credential = load_credential(Path(credential))
            except ValueError as err:
                raise LaunchError(f"runtime.credential: {err}") from None

    def run(self, cfg: DictConfig, paths: RunPaths) -> None:
        self._check()
        procs = ProcessGroup()
        flwr_home = Path(tempfile.mkdtemp(prefix="fl-system-flwr-"))
        try:
            env = tool_env({"FLWR_HOME": str(flwr_home)})
            if self.credential is not None:
                token = mint(self.credential, RUN_LIFETIME)
                store_token(flwr_home, self.connection.address, token)
            submit_and_follow(
                cfg, paths, self.connection, procs, env, remote=True, detach=self.detach,
                sign_with=self.credential,
            )  # fmt: skip
        finally:
            procs.stop()
            shutil.rmtree(flwr_home, ignore_errors=True)

    def _check(self) -> None:
        if self.credential is not None:
            try:
                raise_if(flwr_credentials.problems())
            except FlwrInternalsChanged as err:
                raise LaunchError(str(err)) from None
        conn = self.connection
        if conn.insecure and not is_loopback(self.host):
            print(
                f"fl-run: WARNING: plain text to {conn.address}: the run's config and results "
                "cross the network unencrypted",
                file=sys.stderr,
            )
        try:
            wait_reachable(
                self.host,
                self.port,
                self.connect_timeout,
                say=lambda text: print(f"fl-run: {text}", file=sys.stderr, flush=True),
            )
            if not conn.insecure:
                ca = Path(conn.root_certificates) if conn.root_certificates else None
                check_tls(self.host, self.port, ca)
        except DeployError as err:
            raise LaunchError(f"SuperLink Control API: {err}") from None

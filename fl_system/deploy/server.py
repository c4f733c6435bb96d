"""`fl-server`: a SuperLink with this project's defaults, for a machine of its own.

One port, 0.0.0.0:9092, for the SuperNodes (Fleet API) and the operators (Control API:
`fl-run runtime=remote`, `flwr run`): Flower 1.42 serves both, and the Runtime API its
ServerApps use, on one HTTP(S) port. State in a database under --state-dir (so a restarted
SuperLink keeps its
registered nodes), no runtime dependency installation, TLS from an `fl-certs` directory, and
SuperNode authentication with the public keys given by --authorized-keys, registered as
soon as the SuperLink is up; `<state-dir>/ready` exists from then until it stops (a
container health check). Plain text needs --insecure and prints a warning.

Each submitted run's ServerApp is forked by a launcher that imported torch and the apps once
(the SuperLink in `--isolation process`), as `runtime=local` does: Flower's SuperExec would
start a fresh `flwr-serverapp` interpreter for every run, seconds of imports each. The
SuperLink hands ServerApp tasks only to calls signed with a secret made afresh at each start
(Flower's SuperExec auth), which only that launcher holds: the Runtime API shares the public
port.

With TLS, the Control API takes calls from the federation's operators only, each as its
role allows, and writes each call to `<state-dir>/audit.jsonl` (`fl_system.access`): the
operators are in `<state-dir>/operators.json`, read again whenever it changes; the first
start adds the admin whose key fl-certs made (`--certs DIR`'s admin.pub).

`fl-server register KEY.pub ...`, `unregister KEY.pub ...` and `nodes` change and list the
SuperNodes of a SuperLink that runs (`fl_system.deploy.members`); `fl-server operators`,
`audit` and `login` manage its operators, print its audit log and give Flower's CLI a token
(`fl_system.deploy.operator_commands`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fl_system.deploy import members, operator_commands
from fl_system.deploy.certs import CA_CERT, OPERATOR_PAIRS, SERVER_CERT, SERVER_KEY
from fl_system.deploy.operator_commands import DEFAULT_STATE_DIR
from fl_system.runtime.connection_checks import (
    DeployError,
    check_signed_by,
    check_validity,
    echo,
    is_loopback,
    load_cert,
    require_file,
    split_address,
    start_piped,
)
from fl_system.runtime.launch.ports import port_open
from fl_system.runtime.launch.processes import tool_env
from fl_system.runtime.superlink import (
    AUDIT_ENV,
    LOG_ENV,
    LOG_LEVELS,
    OPERATORS_ENV,
    OWN_KEY_ENV,
)
from fl_system.runtime.supernode.launcher import SOCKET_ENV

STARTUP_SECONDS = 60.0
LAUNCHER_STOP_SECONDS = 5.0  # a stopped launcher ends its ServerApps and closes its clients
MEMBER_COMMANDS = ("register", "unregister", "nodes")  # fl-server register KEY.pub ...
READY_FILE = "ready"  # in --state-dir while the SuperLink serves with every key registered
OPERATOR_KEYS = tuple(public for _, public in OPERATOR_PAIRS)  # not SuperNode keys


def say(text: str) -> None:
    print(f"fl-server: {text}", flush=True)


def tls_files(certs: Path) -> tuple[Path, Path, Path]:
    """(ca.crt, server.crt, server.key) of an fl-certs directory, checked."""
    ca_path, cert_path, key_path = certs / CA_CERT, certs / SERVER_CERT, certs / SERVER_KEY
    ca, cert = load_cert(ca_path, "--certs"), load_cert(cert_path, "--certs")
    require_file(key_path, "--certs")
    check_validity(ca, ca_path)
    check_validity(cert, cert_path)
    check_signed_by(cert, ca, cert_path, ca_path)
    return ca_path, cert_path, key_path


def public_keys(paths: Sequence[Path]) -> list[Path]:
    """Every *.pub in the given directories (but the operators' keys, which fl-certs writes
    beside the SuperNodes' keys), plus the files given directly."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.glob("*.pub") if p.name not in OPERATOR_KEYS)
        else:
            found.append(require_file(path, "--authorized-keys"))
    if paths and not found:
        raise DeployError(f"--authorized-keys: no *.pub file in {', '.join(map(str, paths))}")
    return found


def superlink_command(
    args: argparse.Namespace, tls: tuple[Path, Path, Path] | None, secret: Path
) -> list[str]:
    host, port = split_address(args.address, "--address")
    cmd = [
        "fl-superlink",  # Flower's SuperLink, taking heartbeats down to 1 s apart (fl-client: 5)
        "--host",
        host,
        "--port",
        str(port),
        "--database",
        str(args.state_dir / "superlink.db"),
        "--disable-runtime-dependency-installation",
        "--isolation",
        "process",  # the ServerApp launcher starts each run's ServerApp
        "--superexec-auth-secret-file",
        str(secret),
    ]
    if tls is None:
        cmd.append("--insecure")
    else:
        ca, cert, key = tls
        cmd += ["--ssl-ca-certfile", str(ca), "--ssl-certfile", str(cert)]
        cmd += ["--ssl-keyfile", str(key)]
    if args.authorized_keys or args.enroll_dir:
        cmd.append("--enable-supernode-auth")
    return cmd


def launcher_command(address: str, ca: Path | None, secret: Path, socket_path: Path) -> list[str]:
    """The ServerApp launcher, claiming runs to start from the SuperLink's runtime API when
    the SuperLink wakes its socket (it serves no SuperNode) and exiting when fl-server is
    gone."""
    cmd = [
        sys.executable,
        "-m",
        "fl_system.runtime.supernode.launcher",
        "--socket",
        str(socket_path),
        "--parent-pid",
        str(os.getpid()),
        "--serverapp-api-address",
        address,
        "--superexec-auth-secret-file",
        str(secret),
    ]
    return cmd + (["--root-certificates", str(ca)] if ca else [])


def local_address(address: str) -> str:
    """Where a process on this machine reaches a SuperLink bound to `address`."""
    host, port = split_address(address, "--address")
    return f"127.0.0.1:{port}" if host in ("0.0.0.0", "", "::") else address


def new_secret(folder: Path) -> Path:
    """A file only this user reads, holding 32 bytes from the operating system's entropy."""
    path = folder / "superexec.secret"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(secrets.token_bytes(32))
    return path


def register_keys(
    keys: Sequence[Path], control: str, ca: Path | None, own: Ed25519PrivateKey | None
) -> None:
    """Register each key through the Control API at `control` (`members.register`), as
    fl-server's own operator `own`."""
    with members.control_api(control, ca, own) as stub:
        for key in keys:
            _, new = members.register(stub, key)
            say(f"{'registered' if new else 'kept the registered'} SuperNode key {key.name}")


def enroll(
    folder: Path, done: set[Path], control: str, ca: Path | None, own: Ed25519PrivateKey | None
) -> set[Path]:
    """Register the keys in `folder` not seen yet; those seen now. A file that is no key is
    reported and left alone (the SuperLink goes on serving)."""
    new = sorted(set(folder.glob("*.pub")) - done) if folder.is_dir() else []
    for key in new:
        try:
            register_keys([key], control, ca, own)
        except DeployError as err:
            say(f"error: {folder.name}/{key.name} was not registered: {err}")
    return set(new)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fl-server", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--address",
        default="0.0.0.0:9092",
        help="SuperNodes connect and operators submit here (fl-client --superlink, fl-run "
        "runtime.address)",
    )
    parser.add_argument(
        "--certs", type=Path, help="an fl-certs directory: ca.crt, server.crt, server.key"
    )
    parser.add_argument(
        "--authorized-keys",
        type=Path,
        action="append",
        default=[],
        help="SuperNode public keys (a .pub file, or a directory of them; repeatable): "
        "turns SuperNode authentication on",
    )
    parser.add_argument(
        "--enroll-dir",
        type=Path,
        help="register every SuperNode public key (*.pub) that appears here while serving "
        "(replicas of one compose service enroll themselves: fl-client --enroll); turns "
        "SuperNode authentication on",
    )
    parser.add_argument(
        "--log-level",
        choices=LOG_LEVELS,
        default="info",
        help="info: the SuperLink's log without a line per poll and reply of every node; "
        "debug: with them",
    )
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument(
        "--insecure", action="store_true", help="plain text, no TLS: trusted networks only"
    )
    return parser.parse_args(argv)


def run(args: argparse.Namespace) -> int:
    host, port = split_address(args.address, "--address")
    if args.insecure and args.certs:
        raise DeployError("--insecure and --certs contradict each other; choose one")
    if not args.insecure and not args.certs:
        raise DeployError(
            "TLS needs --certs DIR (make it with: fl-certs DIR --server-name HOST "
            "--supernodes N); pass --insecure for plain text on a trusted network"
        )
    if args.insecure and (args.authorized_keys or args.enroll_dir):
        raise DeployError(
            "SuperNode authentication (--authorized-keys, --enroll-dir) needs TLS (--certs)"
        )
    tls = tls_files(args.certs) if args.certs else None
    keys = public_keys(args.authorized_keys)
    if args.insecure and not is_loopback(host):
        say(
            f"WARNING: plain text on {args.address}: model updates cross the network "
            "unencrypted and any machine can join"
        )
    if port_open("127.0.0.1", port):
        raise DeployError(f"port {port} is already in use on this machine")
    args.state_dir.mkdir(parents=True, exist_ok=True)

    ready = args.state_dir / READY_FILE
    ready.unlink(missing_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fl-server-"))
    wake = work / "launcher.sock"  # the SuperLink wakes the launcher here per new run
    env = tool_env({LOG_ENV: args.log_level, SOCKET_ENV: str(wake)})
    own = None
    if tls is not None:  # the Control API takes its operators' calls only
        own, own_public = operator_commands.own_operator()
        registry = operator_commands.registry(args.state_dir)
        env |= {OPERATORS_ENV: str(registry.path), OWN_KEY_ENV: own_public,
                AUDIT_ENV: str(operator_commands.audit_path(args.state_dir))}  # fmt: skip
        for line in operator_commands.first_operators(registry, args.certs):
            say(line)
    secret = new_secret(work)
    here = local_address(args.address)
    ca = tls[0] if tls else None
    # its own session: a Ctrl-C meant for fl-server does not end it first; fl-server does
    launcher = start_piped(launcher_command(here, ca, secret, wake), env, own_session=True)
    proc = start_piped(superlink_command(args, tls, secret), env)
    outputs = [_echo_in_background(p) for p in (launcher, proc)]
    stopper = _Stopper(proc, launcher)
    try:
        _wait_ports(proc, [port])
        if keys:
            register_keys(keys, here, ca, own)
        enrolled: set[Path] = set()
        ready.write_text(f"{args.address}\n")
        say(
            f"SuperLink ready on {args.address} (SuperNodes and the Control API), "
            f"{'TLS' if tls else 'PLAIN TEXT'}"
            + (f", {len(keys)} SuperNode keys authorised" if keys else "")
        )
        while (code := proc.poll()) is None:
            if args.enroll_dir is not None:
                enrolled |= enroll(args.enroll_dir, enrolled, here, ca, own)
            if launcher.poll() is not None and not stopper.stopping:
                raise DeployError(
                    f"the ServerApp launcher exited with code {launcher.returncode} (its output "
                    "is above); no run could start, so the SuperLink was stopped"
                )
            time.sleep(0.5)
        _end(launcher)  # its output ends with it
        for output in outputs:
            output.join(timeout=5)
        return code
    except BaseException:
        stopper.stop()
        raise
    finally:
        ready.unlink(missing_ok=True)
        _end(launcher)
        shutil.rmtree(work, ignore_errors=True)


def _echo_in_background(proc: subprocess.Popen) -> threading.Thread:
    assert proc.stdout is not None
    stream = proc.stdout
    output = threading.Thread(target=lambda: deque(echo(stream), maxlen=0), daemon=True)
    output.start()
    return output


def _end(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_ports(proc: subprocess.Popen, ports: list[int]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while not all(port_open("127.0.0.1", p) for p in ports):
        if proc.poll() is not None:
            raise DeployError(f"the SuperLink exited with code {proc.returncode} at start-up")
        if time.monotonic() > deadline:
            raise DeployError(f"the SuperLink did not open ports {ports} in {STARTUP_SECONDS} s")
        time.sleep(0.2)


class _Stopper:
    """Ends the launcher, then the SuperLink: on SIGTERM/SIGINT (the SuperLink gets SIGINT; it
    ignores SIGTERM), after which the main thread's `proc.poll()` says it ended, or on `stop()`
    from anywhere else.

    The launcher goes first, while the SuperLink still answers it: one that finds the SuperLink
    gone mid-call retries for 10 s (Flower's HTTP client) before it looks at its signal."""

    def __init__(self, proc: subprocess.Popen, launcher: subprocess.Popen) -> None:
        self.proc, self.launcher = proc, launcher
        self.stopping = False  # the launcher's exit is ours, not a failure
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)

    def on_signal(self, signum: int, frame: object) -> None:
        self._stop_launcher()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)

    def stop(self) -> None:
        self.on_signal(signal.SIGINT, None)
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _stop_launcher(self) -> None:
        """SIGTERM the launcher and give it LAUNCHER_STOP_SECONDS (`_end` kills it if not)."""
        self.stopping = True
        if self.launcher.poll() is None:
            self.launcher.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.launcher.wait(timeout=LAUNCHER_STOP_SECONDS)


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        if argv[:1] and argv[0] in MEMBER_COMMANDS:  # the running federation's members
            return members.run(members.parse_args(argv), say)
        if argv[:1] and argv[0] in operator_commands.COMMANDS:
            return operator_commands.main(argv, say)
        return run(parse_args(argv))
    except DeployError as err:
        print(f"fl-server: error: {err}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Deployment checks against a real TLS listener: each mistake gets its own sentence."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from fl_system.deploy import certs, certs_cli, client, members, server
from fl_system.deploy.server_watch import ServerWatch
from fl_system.flower import flwr_hooks
from fl_system.runtime.connection_checks import (
    DeployError,
    check_plain,
    check_tls,
    split_address,
    wait_reachable,
)
from fl_system.runtime.launch.ports import free_port


def _material(root: Path, *, names=("localhost",), expired: bool = False) -> Path:
    """An fl-certs directory; `expired` re-signs the server certificate in the past."""
    certs.generate(root, server_names=list(names), supernodes=1)
    if expired:
        from cryptography.hazmat.primitives.serialization import load_pem_private_key
        from cryptography.x509 import load_pem_x509_certificate

        ca_key = load_pem_private_key((root / certs.CA_KEY).read_bytes(), None)
        ca = load_pem_x509_certificate((root / certs.CA_CERT).read_bytes())
        now = dt.datetime.now(dt.UTC)
        key, cert = certs.make_server_cert(
            ca_key,
            ca,
            list(names),
            [],
            not_before=now - dt.timedelta(days=30),
            not_after=now - dt.timedelta(days=1),
        )
        (root / certs.SERVER_CERT).write_bytes(certs.pem_cert(cert))
        (root / certs.SERVER_KEY).write_bytes(certs.pem_key(key))
    return root


@contextmanager
def tls_listener(material: Path | None, host: str = "127.0.0.1") -> Iterator[int]:
    """A TCP listener on loopback that completes TLS handshakes (plain text if None)."""
    sock = socket.create_server((host, 0))
    port = sock.getsockname()[1]
    context = None
    if material is not None:
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(material / certs.SERVER_CERT, material / certs.SERVER_KEY)
        context.set_alpn_protocols(["h2"])
    stop = threading.Event()

    def serve() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except TimeoutError:
                continue
            with conn:
                try:
                    if context is None:
                        conn.sendall(b"HTTP/1.1 400 not tls\r\n\r\n")
                    else:
                        with context.wrap_socket(conn, server_side=True):
                            pass
                except (ssl.SSLError, OSError):
                    pass

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield port
    finally:
        stop.set()
        thread.join()
        sock.close()


def test_a_good_certificate_passes(tmp_path: Path) -> None:
    material = _material(tmp_path / "ok")
    with tls_listener(material) as port:
        check_tls("localhost", port, material / certs.CA_CERT)


def test_another_federations_ca_is_named_as_the_problem(tmp_path: Path) -> None:
    material, other = _material(tmp_path / "ok"), _material(tmp_path / "other")
    with tls_listener(material) as port, pytest.raises(DeployError) as err:
        check_tls("localhost", port, other / certs.CA_CERT)
    assert f"not signed by {other / certs.CA_CERT} (wrong CA certificate?)" in str(err.value)


def test_an_expired_server_certificate_says_expired(tmp_path: Path) -> None:
    material = _material(tmp_path / "old", expired=True)
    with tls_listener(material) as port, pytest.raises(DeployError) as err:
        check_tls("localhost", port, material / certs.CA_CERT)
    assert "the server's certificate has expired; make new material with fl-certs" in str(err.value)


def test_a_certificate_for_another_name_says_which_name(tmp_path: Path) -> None:
    material = _material(tmp_path / "named", names=("superlink.example",))
    # the certificate covers superlink.example, localhost, 127.0.0.1 and ::1, not 127.0.0.2
    with tls_listener(material, "127.0.0.2") as port, pytest.raises(DeployError) as err:
        check_tls("127.0.0.2", port, material / certs.CA_CERT)
    assert "not valid for '127.0.0.2'; make it with fl-certs --server-name/--server-ip" in str(
        err.value
    )


def test_a_plain_text_server_is_told_apart(tmp_path: Path) -> None:
    material = _material(tmp_path / "ok")
    with tls_listener(None) as port, pytest.raises(DeployError) as err:
        check_tls("localhost", port, material / certs.CA_CERT)
    assert "does not speak TLS" in str(err.value)


def test_a_plain_text_client_is_told_that_the_server_speaks_tls(tmp_path: Path) -> None:
    material = _material(tmp_path / "ok")
    with tls_listener(material) as port, pytest.raises(DeployError) as err:
        check_plain("127.0.0.1", port)
    assert str(err.value).startswith(f"127.0.0.1:{port} speaks TLS and this client was started")
    with tls_listener(None) as port:
        check_plain("127.0.0.1", port)  # a plain-text server is what --insecure expects


def test_nothing_listening_gives_up_after_the_timeout_with_a_countdown() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        said: list[str] = []
        with pytest.raises(DeployError, match=rf"cannot reach 127.0.0.1:{port} after 1 s"):
            wait_reachable("127.0.0.1", port, 1.0, say=said.append, interval=0.2)
    assert said and "giving up in" in said[0]


@pytest.mark.parametrize("address", ["nohost", "host:", ":9092", "host:99999", "host:port"])
def test_addresses_must_be_host_and_port(address: str) -> None:
    with pytest.raises(DeployError, match="must be HOST:PORT"):
        split_address(address, "--server")


def test_fl_server_refuses_plain_text_unless_asked(tmp_path: Path, capsys) -> None:
    assert server.main(["--state-dir", str(tmp_path)]) == 2
    assert "fl-server: error: TLS needs --certs DIR" in capsys.readouterr().err


def test_fl_server_refuses_an_expired_certificate(tmp_path: Path, capsys) -> None:
    material = _material(tmp_path / "old", expired=True)
    assert server.main(["--certs", str(material), "--state-dir", str(tmp_path / "s")]) == 2
    assert f"{material / certs.SERVER_CERT} expired on " in capsys.readouterr().err


def test_fl_server_refuses_a_certificate_of_another_ca(tmp_path: Path, capsys) -> None:
    material, other = _material(tmp_path / "a"), _material(tmp_path / "b")
    (material / certs.CA_CERT).write_bytes((other / certs.CA_CERT).read_bytes())
    assert server.main(["--certs", str(material), "--state-dir", str(tmp_path / "s")]) == 2
    assert "is not signed by" in capsys.readouterr().err


def test_fl_client_checks_its_partition_before_connecting(tmp_path: Path, capsys) -> None:
    args = ["--server", "127.0.0.1:9", "--partition-id", "3", "--num-partitions", "3"]
    assert client.main([*args, "--insecure"]) == 2
    assert "--partition-id 3 is out of range for --num-partitions 3 (valid: 0..2)" in (
        capsys.readouterr().err
    )


def test_fl_client_rejects_a_key_that_is_not_a_supernode_key(tmp_path: Path, capsys) -> None:
    material = _material(tmp_path / "m")
    args = ["--server", "127.0.0.1:9", "--partition-id", "0", "--num-partitions", "1"]
    ca = ["--root-certificates", str(material / certs.CA_CERT)]
    assert client.main([*args, *ca, "--auth-key", str(material / certs.SERVER_KEY)]) == 2
    assert "is not an OpenSSH EC private key" in capsys.readouterr().err


def test_fl_certs_never_overwrites(tmp_path: Path, capsys) -> None:
    assert certs_cli.main([str(tmp_path), "--server-name", "a", "--supernodes", "1"]) == 0
    before = (tmp_path / certs.CA_CERT).read_bytes()
    assert certs_cli.main([str(tmp_path), "--server-name", "a", "--supernodes", "1"]) == 2
    assert "nothing was written" in capsys.readouterr().err
    assert certs_cli.main([str(tmp_path), "--server-name", "a", "--if-missing"]) == 0
    assert (tmp_path / certs.CA_CERT).read_bytes() == before
    assert oct((tmp_path / "supernode-0.key").stat().st_mode & 0o777) == "0o600"


def test_fl_certs_bundles_give_each_machine_only_its_share(tmp_path: Path) -> None:
    material, out = tmp_path / "material", tmp_path / "out"
    args = [str(material), "--server-name", "a", "--supernodes", "2", "--bundles", str(out)]
    assert certs_cli.main(args) == 0
    listing = {d.name: sorted(f.name for f in d.iterdir()) for d in out.iterdir()}
    operators = ["admin.pub", "ca.crt", "submitter.pub"]
    assert listing == {
        "superlink": [
            "admin.pub",
            "ca.crt",
            "server.crt",
            "server.key",
            "submitter.pub",
            "supernode-0.pub",
            "supernode-1.pub",
        ],
        "admin": ["admin.key", "ca.crt"],
        "submitter": ["ca.crt", "submitter.key"],
        "supernode-0": [*operators, "supernode-0.key"],
        "supernode-1": [*operators, "supernode-1.key"],
        "public": operators,
    }
    assert not any(f.name == certs.CA_KEY for f in out.rglob("*"))
    for key in out.rglob("*.key"):
        assert oct(key.stat().st_mode & 0o777) == "0o600", key
        assert key.read_bytes() == (material / key.name).read_bytes()
    assert oct((out / "superlink" / "ca.crt").stat().st_mode & 0o777) == "0o644"
    # a later call (the compose job on every `up`) keeps what is there and fills what is not
    (out / "supernode-1" / "supernode-1.key").unlink()
    assert certs_cli.main([*args, "--if-missing"]) == 0
    assert (out / "supernode-1" / "supernode-1.key").read_bytes() == (
        material / "supernode-1.key"
    ).read_bytes()
    # material made before the submitter's credential existed gains it, the rest is kept
    admin = (material / certs.ADMIN_KEY).read_bytes()
    for name in (certs.SUBMITTER_KEY, certs.SUBMITTER_PUB):
        (material / name).unlink()
        for found in out.rglob(name):
            found.unlink()
    assert certs_cli.main([*args, "--if-missing"]) == 0
    assert (material / certs.ADMIN_KEY).read_bytes() == admin
    submitter = (material / certs.SUBMITTER_KEY).read_bytes()
    assert (out / "submitter" / certs.SUBMITTER_KEY).read_bytes() == submitter
    assert oct((material / certs.SUBMITTER_KEY).stat().st_mode & 0o777) == "0o600"


def test_fl_client_stops_a_supernode_that_ignores_sigint_within_its_grace(tmp_path: Path) -> None:
    """docker stop allows 10 s: a SuperNode that does not end on SIGINT (still reconnecting to
    a SuperLink that is gone) is killed after the grace, with its whole process group."""
    script = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "child = subprocess.Popen([sys.executable, '-c', "
        "'import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); time.sleep(60)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    started = time.monotonic()
    client._stop(proc)
    assert time.monotonic() - started < client.STOP_GRACE_SECONDS + 3
    assert proc.poll() is not None
    time.sleep(0.2)
    assert (
        not Path(f"/proc/{grandchild}").exists()
        or "Z" in Path(f"/proc/{grandchild}/stat").read_text().split()[2]
    )


def test_the_server_watch_stops_a_supernode_whose_server_stays_gone() -> None:
    """After an error line, a server port closed for the whole limit stops the SuperNode."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # bound, never listening: connections are refused
        hung = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
        )
        watch = ServerWatch("127.0.0.1", closed, 1.0, hung, client._stop, interval=0.1)
        time.sleep(1.5)
        assert hung.poll() is None and not watch.lost  # not armed: nothing was wrong yet
        watch.arm()
        hung.wait(timeout=client.STOP_GRACE_SECONDS + 5)
        assert watch.lost


def test_the_server_watch_leaves_a_supernode_whose_server_is_up(tmp_path: Path) -> None:
    with tls_listener(None) as port:
        node = subprocess.Popen(
            [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
        )
        try:
            watch = ServerWatch("127.0.0.1", port, 0.5, node, client._stop, interval=0.1)
            watch.arm()
            time.sleep(1.5)
            assert node.poll() is None and not watch.lost
        finally:
            watch.done.set()
            node.kill()
            node.wait()


def test_fl_certs_makes_one_node_key_pair_on_the_nodes_machine(tmp_path: Path, capsys) -> None:
    assert certs_cli.main([str(tmp_path), "--node-key", "clinic"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clinic.key", "clinic.pub"]
    assert oct((tmp_path / "clinic.key").stat().st_mode & 0o777) == "0o600"
    assert len(members.key_bytes(tmp_path / "clinic.pub")) > 0  # what fl-server register sends
    assert certs_cli.main([str(tmp_path), "--node-key", "clinic"]) == 2
    assert "already has clinic.key, clinic.pub; nothing was written" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        certs_cli.main([str(tmp_path), "--node-key", "x", "--server-name", "a"])
    assert refused.value.code == 2
    assert "--node-key makes one key pair only" in capsys.readouterr().err


def test_registering_a_private_key_or_a_certificate_is_refused(tmp_path: Path) -> None:
    material = _material(tmp_path / "m")
    for wrong in (material / "supernode-0.key", material / certs.SERVER_CERT):
        with pytest.raises(DeployError, match="is not an OpenSSH public key"):
            members.key_bytes(wrong)


def test_fl_server_register_names_a_control_api_nobody_answers(tmp_path: Path, capsys) -> None:
    material = _material(tmp_path / "m")
    control = f"127.0.0.1:{free_port()}"
    args = ["register", str(material / "supernode-0.pub"), "--insecure", "--control", control]
    assert server.main(args) == 2
    assert "fl-server: error: listing the SuperNodes failed: " in capsys.readouterr().err


def test_fl_client_refuses_a_heartbeat_out_of_range(capsys) -> None:
    args = ["--server", "127.0.0.1:9", "--partition-id", "0", "--num-partitions", "1"]
    assert client.main([*args, "--insecure", "--heartbeat", "0.5"]) == 2
    assert "--heartbeat must be in [1, 1800] s, got 0.5" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("detail", "said"),
    [
        (
            "Invalid node ID",
            "the SuperLink no longer admits this SuperNode: its key was unregistered "
            "(`fl-server register KEY.pub` on the server admits it again)",
        ),
        (
            "Invalid timestamp",
            "the SuperLink refused this SuperNode (Invalid timestamp): is this machine's clock "
            "right?",
        ),
    ],
)
def test_fl_client_says_why_the_superlink_refused_an_admitted_node(detail: str, said: str) -> None:
    assert client._fatal(f"{flwr_hooks.REFUSED_LOG} {detail}\n") == said


def test_fl_server_enrolls_only_over_tls_and_then_turns_authentication_on(
    tmp_path: Path, capsys
) -> None:
    assert (
        server.main(["--insecure", "--enroll-dir", str(tmp_path), "--state-dir", str(tmp_path)])
        == 2
    )
    assert "SuperNode authentication (--authorized-keys, --enroll-dir) needs TLS" in (
        capsys.readouterr().err
    )
    args = server.parse_args(["--certs", str(tmp_path), "--enroll-dir", str(tmp_path)])
    command = server.superlink_command(args, None, 9999)
    assert command[0] == "fl-superlink" and "--enable-supernode-auth" in command

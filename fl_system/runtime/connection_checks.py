"""Checks that turn deployment mistakes into one clear sentence before Flower starts.

Flower's own processes retry forever or fail deep inside gRPC; these run first, with
bounded waits and a visible countdown.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.serialization import load_ssh_private_key


class DeployError(RuntimeError):
    """A deployment setting cannot work; the message says what to change."""


def start_piped(
    cmd: list[str], env: dict[str, str], *, own_session: bool = False
) -> subprocess.Popen:
    """Start a Flower command with its output (stdout and stderr) piped back, for `echo`."""
    return subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
        start_new_session=own_session,
    )


def echo(lines: Iterable[str]) -> Iterator[str]:
    """Print a Flower process's output as it comes, minus its HTTP access log (a line every
    poll), and yield each printed line to the caller."""
    for line in lines:
        if "[uvicorn.access]" in line:
            continue
        sys.stdout.write(line)
        sys.stdout.flush()
        yield line


def split_address(address: str, what: str) -> tuple[str, int]:
    """'host:port' or '[v6]:port' -> (host, port)."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise DeployError(f"{what} must be HOST:PORT, got {address!r}")
    return host, int(port)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def require_file(path: Path, what: str) -> Path:
    if not path.is_file():
        raise DeployError(f"{what}: no file at {path}")
    try:
        path.read_bytes()
    except OSError as err:
        raise DeployError(f"{what}: cannot read {path}: {err.strerror}") from None
    return path


def load_cert(path: Path, what: str) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(require_file(path, what).read_bytes())
    except ValueError:
        raise DeployError(f"{what}: {path} is not a PEM certificate") from None


def check_validity(cert: x509.Certificate, path: Path, now: dt.datetime | None = None) -> None:
    now = now or dt.datetime.now(dt.UTC)
    if now > cert.not_valid_after_utc:
        raise DeployError(
            f"{path} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC; "
            "make new material with fl-certs"
        )
    if now < cert.not_valid_before_utc:
        raise DeployError(
            f"{path} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC "
            "(check this machine's clock)"
        )


def check_signed_by(cert: x509.Certificate, ca: x509.Certificate, cert_path: Path, ca_path: Path):
    """The certificate's signature verifies with the CA's public key."""
    key = ca.public_key()
    try:
        if isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(
                cert.signature,
                cert.tbs_certificate_bytes,
                ec.ECDSA(cert.signature_hash_algorithm),
            )
        elif isinstance(key, rsa.RSAPublicKey):
            key.verify(
                cert.signature,
                cert.tbs_certificate_bytes,
                padding.PKCS1v15(),
                cert.signature_hash_algorithm,
            )
        else:
            return  # other key types: leave the verdict to the TLS stack
    except InvalidSignature:
        raise DeployError(
            f"{cert_path} is not signed by {ca_path} (certificate and CA do not belong together)"
        ) from None


def check_auth_key(path: Path) -> None:
    """A SuperNode authentication key must be an OpenSSH EC private key (fl-certs makes them)."""
    data = require_file(path, "--auth-key").read_bytes()
    try:
        key = load_ssh_private_key(data, None)
    except (ValueError, TypeError):
        key = None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise DeployError(
            f"--auth-key: {path} is not an OpenSSH EC private key (make one with fl-certs)"
        )


def reachable(host: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a TCP connection to host:port succeeds now."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_reachable(
    host: str,
    port: int,
    timeout: float,
    *,
    say: Callable[[str], None],
    interval: float = 2.0,
) -> None:
    """Wait until a TCP connection to host:port succeeds; say how long is left meanwhile."""
    deadline = time.monotonic() + timeout
    last_said = -1e9
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(5.0, max(timeout, 0.5))):
                return
        except socket.gaierror as err:
            raise DeployError(f"cannot resolve {host!r}: {err.strerror}") from None
        except OSError as err:
            reason = err.strerror or type(err).__name__
        left = deadline - time.monotonic()
        if left <= 0:
            raise DeployError(
                f"cannot reach {host}:{port} after {timeout:.0f} s ({reason}); check the "
                "address and port, that the server runs, and the firewall"
            )
        if time.monotonic() - last_said >= 10:
            say(f"waiting for {host}:{port} ({reason}); giving up in {left:.0f} s")
            last_said = time.monotonic()
        time.sleep(min(interval, max(left, 0.0)))


def _handshake(host: str, port: int, context: ssl.SSLContext, timeout: float) -> None:
    """One TLS handshake as Flower's gRPC client makes it (ALPN h2)."""
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection((host, port), timeout=timeout) as raw,
        context.wrap_socket(raw, server_hostname=host),
    ):
        pass


def check_plain(host: str, port: int, timeout: float = 10.0) -> None:
    """A client started with --insecure must find a server that speaks plain text: a TLS
    server would only ever look unreachable to it."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # only asking whether TLS answers at all
    try:
        _handshake(host, port, context, timeout)
    except (ssl.SSLError, OSError):
        return  # no TLS handshake: plain text, as asked
    raise DeployError(
        f"{host}:{port} speaks TLS and this client was started with --insecure (plain text); "
        "start it with --root-certificates CA.crt (the federation's ca.crt) instead"
    )


def check_tls(host: str, port: int, ca_file: Path | None, timeout: float = 10.0) -> None:
    """Handshake like Flower's gRPC client would; explain a certificate the CA (or, with
    None, the system's trust store) cannot verify."""
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    try:
        _handshake(host, port, context, timeout)
    except ssl.SSLCertVerificationError as err:
        detail = err.verify_message or str(err)
        if "expired" in detail:
            hint = "the server's certificate has expired; make new material with fl-certs"
        elif "Hostname mismatch" in detail or "IP address mismatch" in detail:
            hint = (
                f"the server's certificate is not valid for {host!r}; make it with "
                f"fl-certs --server-name/--server-ip {host}"
            )
        else:
            trusted = ca_file or "the system's trusted CAs (give the federation's ca.crt)"
            hint = f"the server's certificate is not signed by {trusted} (wrong CA certificate?)"
        raise DeployError(f"TLS check of {host}:{port} failed: {hint} [{detail}]") from None
    except ssl.SSLError as err:
        if "WRONG_VERSION_NUMBER" in str(err) or "record layer failure" in str(err):
            raise DeployError(
                f"{host}:{port} does not speak TLS (a server started with --insecure?); "
                "use --insecure on both sides only on a trusted network"
            ) from None
        raise DeployError(f"TLS check of {host}:{port} failed: {err}") from None
    except OSError as err:
        raise DeployError(f"TLS check of {host}:{port} failed: {err}") from None

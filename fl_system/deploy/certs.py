"""TLS and SuperNode-auth material for a federation: `fl-certs DIR ...`.

Writes into DIR
    ca.crt, ca.key                  a private certificate authority
    server.crt, server.key          the SuperLink's certificate, signed by the CA, with the
                                    server's names and addresses as subject alternative names
    supernode-<i>.key / .pub        one EC key pair per SuperNode (OpenSSH format, NIST P-384,
                                    what Flower's SuperNode authentication expects)
    admin.key / .pub                the first operator's Ed25519 key pair (OpenSSH): fl-server
                                    registers admin.pub as the federation's admin
    submitter.key / .pub            an operator who may submit runs only (a runner, CI):
                                    fl-server registers submitter.pub as a submitter

Clients get ca.crt and their own supernode-<i>.key; the SuperLink gets server.crt/key and
the .pub files (`fl-server --authorized-keys DIR` registers them); ca.key stays where it was
made (it can sign a certificate for any name). `--bundles OUT` also copies each machine's share
into a folder of its own (`fl_system.deploy.bundles`), so that nothing else needs to reach it.

`fl-certs DIR --node-key NAME` makes only NAME.key and NAME.pub, on a node that joins a running
federation: its private key never leaves its machine (`fl-server register NAME.pub` admits it).
`fl-certs DIR --operator-key NAME` makes an operator's NAME.key (its credential) and NAME.pub
the same way, on the operator's machine (`fl-server operators add NAME.pub --role ROLE`).

Private keys are written with mode 0600 and nothing is ever overwritten.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT, CA_KEY = "ca.crt", "ca.key"
SERVER_CERT, SERVER_KEY = "server.crt", "server.key"
ADMIN_KEY, ADMIN_PUB = "admin.key", "admin.pub"
SUBMITTER_KEY, SUBMITTER_PUB = "submitter.key", "submitter.pub"
OPERATOR_PAIRS = ((ADMIN_KEY, ADMIN_PUB), (SUBMITTER_KEY, SUBMITTER_PUB))  # made with the CA
LOOPBACK_NAMES = ("localhost",)
LOOPBACK_IPS = ("127.0.0.1", "::1")


def supernode_key_names(index: int) -> tuple[str, str]:
    """(private, public) file names of SuperNode `index`'s key pair."""
    return f"supernode-{index}.key", f"supernode-{index}.pub"


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "fl_system federation"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def make_ca(days: int, now: dt.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP384R1())
    name = _name("fl_system federation CA")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_server_cert(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    names: Sequence[str],
    ips: Sequence[str],
    *,
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A server certificate valid for `names` and `ips` (plus loopback), signed by the CA."""
    key = ec.generate_private_key(ec.SECP384R1())
    all_names = list(dict.fromkeys([*names, *LOOPBACK_NAMES]))
    all_ips = list(dict.fromkeys([*ips, *LOOPBACK_IPS]))
    san = [x509.DNSName(n) for n in all_names] + [
        x509.IPAddress(ipaddress.ip_address(ip)) for ip in all_ips
    ]
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(all_names[0]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName(san), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def supernode_key_pair() -> tuple[bytes, bytes]:
    """(OpenSSH private key, OpenSSH public key) for Flower's SuperNode authentication."""
    return _openssh_pair(ec.generate_private_key(ec.SECP384R1()))


def operator_key_pair() -> tuple[bytes, bytes]:
    """(OpenSSH private key, OpenSSH public key) of an operator: Ed25519, what its Control API
    tokens are signed with (`fl_system.access.tokens`)."""
    return _openssh_pair(ed25519.Ed25519PrivateKey.generate())


def _openssh_pair(
    key: ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey,
) -> tuple[bytes, bytes]:
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public + b"\n"


def write_new(path: Path, data: bytes, *, private: bool) -> None:
    """Create `path` (never overwrite); private files are readable by the owner only."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def generate(
    directory: Path,
    *,
    server_names: Sequence[str],
    server_ips: Sequence[str] = (),
    supernodes: int,
    days: int = 365,
) -> list[Path]:
    """Write a CA, a server certificate and `supernodes` key pairs; returns the files."""
    planned = [CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY, *sum(OPERATOR_PAIRS, ())] + [
        name for i in range(supernodes) for name in supernode_key_names(i)
    ]
    existing = [n for n in planned if (directory / n).exists()]
    if existing:
        raise FileExistsError(
            f"{directory} already has {', '.join(existing)}; nothing was written "
            "(remove them, choose another directory, or pass --if-missing)"
        )
    now = dt.datetime.now(dt.UTC)
    ca_key, ca_cert = make_ca(days, now)
    key, cert = make_server_cert(
        ca_key,
        ca_cert,
        server_names,
        server_ips,
        not_before=now - dt.timedelta(minutes=5),
        not_after=now + dt.timedelta(days=days),
    )
    directory.mkdir(parents=True, exist_ok=True)
    files = {
        CA_CERT: (pem_cert(ca_cert), False),
        CA_KEY: (pem_key(ca_key), True),
        SERVER_CERT: (pem_cert(cert), False),
        SERVER_KEY: (pem_key(key), True),
    }
    for i in range(supernodes):
        private, public = supernode_key_pair()
        private_name, public_name = supernode_key_names(i)
        files[private_name] = (private, True)
        files[public_name] = (public, False)
    for name, (data, private) in files.items():
        write_new(directory / name, data, private=private)
    return [directory / n for n in files] + operator_keys(directory)


def operator_keys(directory: Path) -> list[Path]:
    """The admin's and the submitter's key pairs, each made unless `directory` has it (so
    material made before the submitter existed gains it); returns the files written."""
    made = []
    for private_name, public_name in OPERATOR_PAIRS:
        if (directory / private_name).exists() or (directory / public_name).exists():
            continue
        for name, data in zip((private_name, public_name), operator_key_pair(), strict=True):
            write_new(directory / name, data, private=name == private_name)
            made.append(directory / name)
    return made


def node_key(directory: Path, name: str, pair=supernode_key_pair) -> list[Path]:
    """One key pair, `name`.key (0600) and `name`.pub, made where it is used: a SuperNode's
    (`pair`: supernode_key_pair) or an operator's (operator_key_pair)."""
    paths = [directory / f"{name}.key", directory / f"{name}.pub"]
    existing = [p.name for p in paths if p.exists()]
    if existing:
        raise FileExistsError(f"{directory} already has {', '.join(existing)}; nothing was written")
    directory.mkdir(parents=True, exist_ok=True)
    for path, data in zip(paths, pair(), strict=True):
        write_new(path, data, private=path.suffix == ".key")
    return paths

"""TLS and SuperNode-auth material for a federation: `fl-certs DIR ...`.

Writes into DIR
    ca.crt, ca.key                  a private certificate authority
    server.crt, server.key          the SuperLink's certificate, signed by the CA, with the
                                    server's names and addresses as subject alternative names
    supernode-<i>.key / .pub        one EC key pair per SuperNode (OpenSSH format, NIST P-384,
                                    what Flower's SuperNode authentication expects)
    admin.key / .pub                the first operator's Ed25519 key pair (OpenSSH): fl-server
                                    registers admin.pub as the federation's admin

Clients get ca.crt and their own supernode-<i>.key; the SuperLink gets server.crt/key and
the .pub files (`fl-server --authorized-keys DIR` registers them); ca.key stays where it was
made (it can sign a certificate for any name). `--bundles OUT` also copies each machine's share
into a folder of its own, so that nothing else needs to reach it:

    OUT/superlink/      ca.crt, server.crt, server.key, supernode-*.pub, admin.pub
    OUT/admin/          ca.crt, admin.key (the admin's credential: fl-server register, ...)
    OUT/supernode-<i>/  ca.crt, supernode-<i>.key, admin.pub
    OUT/public/         ca.crt, admin.pub (for nodes: fl-client --trust admin.pub runs the
                        admin's signed apps only)

`fl-certs DIR --node-key NAME` makes only NAME.key and NAME.pub, on a node that joins a running
federation: its private key never leaves its machine (`fl-server register NAME.pub` admits it).
`fl-certs DIR --operator-key NAME` makes an operator's NAME.key (its credential) and NAME.pub
the same way, on the operator's machine (`fl-server operators add NAME.pub --role ROLE`).

Private keys are written with mode 0600 and nothing is ever overwritten.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_CERT, CA_KEY = "ca.crt", "ca.key"
SERVER_CERT, SERVER_KEY = "server.crt", "server.key"
ADMIN_KEY, ADMIN_PUB = "admin.key", "admin.pub"
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


def _write(path: Path, data: bytes, *, private: bool) -> None:
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
    planned = [CA_CERT, CA_KEY, SERVER_CERT, SERVER_KEY, ADMIN_KEY, ADMIN_PUB] + [
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
    admin_private, admin_public = operator_key_pair()
    files[ADMIN_KEY], files[ADMIN_PUB] = (admin_private, True), (admin_public, False)
    for i in range(supernodes):
        private, public = supernode_key_pair()
        private_name, public_name = supernode_key_names(i)
        files[private_name] = (private, True)
        files[public_name] = (public, False)
    for name, (data, private) in files.items():
        _write(directory / name, data, private=private)
    return [directory / n for n in files]


def node_key(directory: Path, name: str, pair=supernode_key_pair) -> list[Path]:
    """One key pair, `name`.key (0600) and `name`.pub, made where it is used: a SuperNode's
    (`pair`: supernode_key_pair) or an operator's (operator_key_pair)."""
    paths = [directory / f"{name}.key", directory / f"{name}.pub"]
    existing = [p.name for p in paths if p.exists()]
    if existing:
        raise FileExistsError(f"{directory} already has {', '.join(existing)}; nothing was written")
    directory.mkdir(parents=True, exist_ok=True)
    for path, data in zip(paths, pair(), strict=True):
        _write(path, data, private=path.suffix == ".key")
    return paths


def bundle_files(supernodes: int) -> dict[str, list[str]]:
    """The files each machine needs, by bundle name."""
    public_keys = [supernode_key_names(i)[1] for i in range(supernodes)]
    bundles = {
        "superlink": [CA_CERT, SERVER_CERT, SERVER_KEY, *public_keys, ADMIN_PUB],
        "admin": [CA_CERT, ADMIN_KEY],
        "public": [CA_CERT, ADMIN_PUB],
    }
    for i in range(supernodes):
        bundles[f"supernode-{i}"] = [CA_CERT, supernode_key_names(i)[0], ADMIN_PUB]
    return bundles


def write_bundles(
    material: Path, out: Path, supernodes: int, *, owner: tuple[int, int] | None = None
) -> list[Path]:
    """Copy each machine's share of `material` into out/<bundle>/ (files already there are
    kept); private keys stay 0600. With `owner` (uid, gid) the copies are given to that user
    (fl-certs run as root for the users of a container image). Returns the files written."""
    written = []
    for bundle, names in bundle_files(supernodes).items():
        folder = out / bundle
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            target = folder / name
            if target.exists():
                continue
            private = name.endswith(".key")
            _write(target, (material / name).read_bytes(), private=private)
            if owner is not None:
                os.chown(target, *owner)
            written.append(target)
        if owner is not None:
            os.chown(folder, *owner)
    return written


def _owner(value: str) -> tuple[int, int]:
    uid, _, gid = value.partition(":")
    try:
        return int(uid), int(gid or uid)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not UID[:GID]: {value!r}") from None


def _check_ip(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IP address: {value!r}") from None
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="fl-certs",
        description="Make a CA, a SuperLink certificate and SuperNode key pairs.",
    )
    parser.add_argument("directory", type=Path, help="where to write the files")
    parser.add_argument(
        "--server-name",
        action="append",
        default=[],
        help="a DNS name clients use for the SuperLink (repeatable; localhost is always added)",
    )
    parser.add_argument(
        "--server-ip",
        action="append",
        default=[],
        type=_check_ip,
        help="an IP address clients use for the SuperLink (repeatable; loopback is added)",
    )
    parser.add_argument("--supernodes", type=int, default=0, help="SuperNode key pairs to make")
    parser.add_argument(
        "--node-key",
        metavar="NAME",
        help="only make one SuperNode key pair, NAME.key and NAME.pub, on the node's own "
        "machine: the private key never leaves it; the operator registers NAME.pub with "
        "`fl-server register`",
    )
    parser.add_argument(
        "--operator-key",
        metavar="NAME",
        help="only make one operator key pair, NAME.key (its credential) and NAME.pub, on the "
        "operator's own machine; an admin adds NAME.pub with `fl-server operators add`",
    )
    parser.add_argument("--days", type=int, default=365, help="validity of the certificates")
    parser.add_argument(
        "--if-missing",
        action="store_true",
        help="keep the material when DIRECTORY already has ca.crt (for one-shot containers)",
    )
    parser.add_argument(
        "--bundles",
        type=Path,
        help="also copy each machine's share into BUNDLES/superlink, BUNDLES/supernode-<i> "
        "and BUNDLES/public (missing files only)",
    )
    parser.add_argument(
        "--bundle-owner",
        type=_owner,
        metavar="UID[:GID]",
        help="give the bundles' files to this user (needs root)",
    )
    args = parser.parse_args(argv)
    if args.supernodes < 0:
        parser.error(f"--supernodes must be >= 0, got {args.supernodes}")
    if args.days < 1:
        parser.error(f"--days must be >= 1, got {args.days}")
    for option, name in (("--node-key", args.node_key), ("--operator-key", args.operator_key)):
        if name is None:
            continue
        if args.server_name or args.server_ip or args.supernodes or args.bundles:
            parser.error(f"{option} makes one key pair only: leave out the server and bundles")
        if not name or "/" in name or name.startswith("."):
            parser.error(f"{option} must be a plain file name, got {name!r}")
        if args.node_key is not None and args.operator_key is not None:
            parser.error("--node-key and --operator-key: one key pair at a time")
        return args
    if not args.server_name and not args.server_ip:
        parser.error("give the SuperLink's address: --server-name HOST and/or --server-ip IP")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    files: list[Path] = []
    try:
        if args.node_key is not None:
            files = node_key(args.directory, args.node_key)
        elif args.operator_key is not None:
            files = node_key(args.directory, args.operator_key, operator_key_pair)
        elif args.if_missing and (args.directory / CA_CERT).exists():
            print(f"fl-certs: {args.directory / CA_CERT} exists; keeping the material there")
        else:
            files = generate(
                args.directory,
                server_names=args.server_name,
                server_ips=args.server_ip,
                supernodes=args.supernodes,
                days=args.days,
            )
        if args.bundles:
            files += write_bundles(
                args.directory, args.bundles, args.supernodes, owner=args.bundle_owner
            )
    except (FileExistsError, OSError) as err:
        print(f"fl-certs: error: {err}", file=sys.stderr)
        return 2
    for path in files:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

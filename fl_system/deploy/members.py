"""SuperNodes that join and leave a running federation: `fl-server register|unregister|nodes`.

With SuperNode authentication on, the SuperLink admits only the public keys registered with
it, and Flower's Control API registers and unregisters keys while it runs (what `flwr
supernode register` / `unregister` call). So a node joins without a restart or a file edited
on the server: it makes its key pair on its own machine (`fl-certs DIR --node-key NAME`: the
private key never leaves it), the operator registers the `.pub` here, and the node starts
`fl-client ... --auth-key NAME.key`. A running experiment handshakes the node when it
connects and samples it from the next round. Unregistering a key ends that node's
membership: the SuperLink refuses it from then on.

On a SuperLink with operators (fl-server with TLS), each call carries a token that the
operator's key signs (`--credential NAME.key`); registering and unregistering need the admin
role, listing any role (`fl_system.access.operators`).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from fl_system.runtime.connection_checks import DeployError, require_file

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

DEFAULT_CONTROL = "127.0.0.1:9092"  # the operator runs these on the server machine
COMMAND_LIFETIME = 300.0  # seconds a command's token is good for


class OperatorToken:
    """Flower's HTTP interceptor interface: every request carries `token` as its bearer."""

    def __init__(self, token: str) -> None:
        self.headers = {"Authorization": f"Bearer {token}"}

    def intercept(self, context, call_next):
        from flwr.supercore.interceptors.http.utils import add_headers

        add_headers(context.request, self.headers)
        return call_next(context)


@contextmanager
def control_api(
    address: str, ca: Path | None, credential: Ed25519PrivateKey | None = None
) -> Iterator[object]:
    """A client of the SuperLink's Control API (HTTPS checked against `ca`; plain HTTP when
    `ca` is None), whose calls carry a token of the operator key `credential`, closed
    afterwards."""
    from flwr.supercore.control.control_http_client import ControlHttpClient
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor

    from fl_system.access.tokens import mint

    interceptors: list[object] = [RuntimeVersionHttpInterceptor(component_name="fl-server")]
    if credential is not None:
        interceptors.append(OperatorToken(mint(credential, COMMAND_LIFETIME)))
    client = ControlHttpClient.from_server_address(
        server_address=address,
        insecure=ca is None,
        root_certificates=ca.read_bytes() if ca else None,
        interceptors=interceptors,
    )
    try:
        yield client
    finally:
        client.close()


def key_bytes(path: Path) -> bytes:
    """The public key in `path` (OpenSSH, a NIST EC curve, as fl-certs writes), in the form
    the SuperLink stores; DeployError naming the file otherwise."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from flwr.supercore.primitives.asymmetric import public_key_to_bytes, uses_nist_ec_curve

    data = require_file(path, "public key").read_bytes()
    try:
        key = serialization.load_ssh_public_key(data)
    except (ValueError, UnsupportedAlgorithm):
        raise DeployError(
            f"{path} is not an OpenSSH public key (give the .pub that fl-certs made; the "
            ".key beside it is private and stays on the node)"
        ) from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not uses_nist_ec_curve(key):
        raise DeployError(f"{path}: SuperNode keys must be NIST EC keys (fl-certs makes P-384)")
    return public_key_to_bytes(key)


def register(stub: object, path: Path) -> tuple[int, bool]:
    """Register the key in `path`: (its node id, whether it was new). A key registered
    before keeps its node id."""
    from flwr.proto.control_pb2 import RegisterNodeRequest

    key = key_bytes(path)
    existing = _node_with_key(stub, key)
    if existing is not None:
        return existing, False
    response = _call(stub.RegisterNode, RegisterNodeRequest(public_key=key), f"registering {path}")
    return int(response.node_id), True


def unregister(stub: object, path: Path) -> int:
    """Unregister the key in `path`; its node id. DeployError if it is not registered."""
    from flwr.proto.control_pb2 import UnregisterNodeRequest

    node_id = _node_with_key(stub, key_bytes(path))
    if node_id is None:
        raise DeployError(f"{path}: no SuperNode is registered with this key")
    _call(stub.UnregisterNode, UnregisterNodeRequest(node_id=node_id), f"unregistering {path}")
    return node_id


def nodes(stub: object) -> list[tuple[int, str]]:
    """(node id, status) of every node still registered, oldest first."""
    return [(int(n.node_id), str(n.status)) for n in _registered(stub)]


def _registered(stub: object) -> list:
    from flwr.proto.control_pb2 import ListNodesRequest

    response = _call(stub.ListNodes, ListNodesRequest(), "listing the SuperNodes")
    return [n for n in response.nodes_info if n.status not in ("unregistered", "deleted")]


def _node_with_key(stub: object, key: bytes) -> int | None:
    return next((int(n.node_id) for n in _registered(stub) if n.public_key == key), None)


def _call(method, request: object, doing: str):
    import httpx
    from flwr.supercore.error import FlowerError

    try:
        return method(request)
    except httpx.HTTPStatusError as err:
        error = FlowerError.from_json(err.response.text)
        status = f"HTTP {err.response.status_code}"
        detail = (error.public_details or error.message) if error else status
        raise DeployError(f"{doing} failed: {detail}") from None
    except httpx.HTTPError as err:
        raise DeployError(f"{doing} failed: {err}") from None


def credential(path: Path | None) -> Ed25519PrivateKey | None:
    """The operator key of `--credential`, None without one."""
    from fl_system.access.tokens import load_credential

    if path is None:
        return None
    try:
        return load_credential(path)
    except ValueError as err:
        raise DeployError(f"--credential: {err}") from None


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="fl-server",
        description="Add SuperNodes to a running federation, remove them, list them.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name, help_text in (
        ("register", "admit SuperNodes with these public keys (their .pub files)"),
        ("unregister", "remove the SuperNodes with these public keys"),
        ("nodes", "list the registered SuperNodes"),
    ):
        command = commands.add_parser(name, help=help_text)
        if name != "nodes":
            command.add_argument("keys", type=Path, nargs="+", metavar="KEY.pub")
        command.add_argument(
            "--control", default=DEFAULT_CONTROL, help="the SuperLink's Control API, HOST:PORT"
        )
        tls = command.add_mutually_exclusive_group(required=True)
        tls.add_argument("--certs", type=Path, help="a folder with the federation's ca.crt")
        tls.add_argument("--root-certificates", type=Path, help="the federation's ca.crt")
        tls.add_argument("--insecure", action="store_true", help="a plain-text SuperLink")
        command.add_argument(
            "--credential",
            type=Path,
            help="your operator key, NAME.key (a SuperLink with operators requires it)",
        )
    return parser.parse_args(argv)


def run(args: argparse.Namespace, say) -> int:
    ca = args.root_certificates or (args.certs / "ca.crt" if args.certs else None)
    if ca is not None:
        require_file(ca, "CA certificate")
    with control_api(args.control, ca, credential(args.credential)) as stub:
        if args.command == "nodes":
            for node_id, status in nodes(stub):
                say(f"{node_id} {status}")
        for path in getattr(args, "keys", []):
            if args.command == "register":
                node_id, new = register(stub, path)
                say(f"{path.name}: node {node_id} " + ("registered" if new else "was registered"))
            else:
                say(f"{path.name}: node {unregister(stub, path)} unregistered")
    return 0

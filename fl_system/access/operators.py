"""A federation's operators: who may call its Control API, and with which role.

The registry is one JSON file on the server's machine (`fl-server operators add|revoke|list`
write it). The SuperLink reads it again whenever it changes, so an operator added or revoked
counts from its next call, without a restart. An operator is a name, a role and an Ed25519
public key (OpenSSH, as `fl-certs DIR --operator-key NAME` writes): the private key, which never
leaves the operator's machine, signs its Control API tokens, which name the key by its
fingerprint (so the key file may be called anything).

Roles (`allowed`): an `admin` does everything (nodes, runs, operators); a `submitter`
submits runs, lists them, and reads and stops the runs it submitted; a `viewer` lists runs and
nodes and reads any run's logs.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import os
import re
import tempfile
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

ADMIN, SUBMITTER, VIEWER = "admin", "submitter", "viewer"
ROLES = (ADMIN, SUBMITTER, VIEWER)
# what a call does, as the roles see it
SUBMIT, LIST, READ, STOP, NODES, MANAGE = "submit", "list", "read", "stop", "nodes", "manage"
DOING = {
    SUBMIT: "submitting a run",
    LIST: "listing",
    READ: "reading a run",
    STOP: "stopping a run",
    NODES: "registering and unregistering SuperNodes",
    MANAGE: "managing the federation",
}
# each role's actions; those in OWN_ONLY only on the runs the operator submitted
GRANTS = {
    ADMIN: frozenset({SUBMIT, LIST, READ, STOP, NODES, MANAGE}),
    SUBMITTER: frozenset({SUBMIT, LIST, READ, STOP}),
    VIEWER: frozenset({LIST, READ}),
}
OWN_ONLY = {SUBMITTER: frozenset({READ, STOP})}
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class RegistryError(ValueError):
    """A registry file or an operator in it that cannot be used (the message says why)."""


@dataclass(frozen=True)
class Operator:
    """One operator of the federation.

    Parameters
    ----------
    name : str
        How it is known in tokens, refusals and the audit log.
    role : str
        One of ROLES.
    public_key : str
        Its Ed25519 public key, one OpenSSH line.
    added : str
        When it was added (ISO 8601, UTC).
    revoked : str | None
        When it was revoked; a revoked operator is refused at its next call.
    """

    name: str
    role: str
    public_key: str
    added: str
    revoked: str | None = None

    def key(self) -> ed25519.Ed25519PublicKey:
        return parse_public_key(self.public_key, self.name)

    @cached_property
    def key_id(self) -> str:
        return key_id(self.key())


def key_id(key: ed25519.Ed25519PublicKey) -> str:
    """A public key's fingerprint as OpenSSH prints it (`ssh-keygen -l`): SHA256:<base64>."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    blob = b"".join(len(p).to_bytes(4, "big") + p for p in (b"ssh-ed25519", raw))
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def allowed(role: str, action: str, own: bool) -> bool:
    """Whether an operator with `role` may do `action`; `own`: on a run it submitted."""
    if action not in GRANTS.get(role, ()):
        return False
    return own or action not in OWN_ONLY.get(role, ())


def roles_for(action: str) -> list[str]:
    """The roles that may do `action` on any run (for a refusal's message)."""
    return [role for role in ROLES if allowed(role, action, own=False)]


def parse_public_key(text: str, name: str) -> ed25519.Ed25519PublicKey:
    """The Ed25519 key in one OpenSSH line; RegistryError naming `name` otherwise."""
    try:
        key = serialization.load_ssh_public_key(text.strip().encode())
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise RegistryError(f"{name}: not an OpenSSH public key") from None
    if not isinstance(key, ed25519.Ed25519PublicKey):
        raise RegistryError(f"{name}: operator keys are Ed25519 (made by fl-certs --operator-key)")
    return key


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise RegistryError(
            f"operator name {name!r}: letters, digits, '.', '_' and '-', at most 64, "
            "starting with a letter or digit"
        )
    return name


class OperatorRegistry:
    """The operators in one JSON file, read again when the file changes.

    Parameters
    ----------
    path : Path
        The registry file; absent means no operators yet.
    extra : tuple[Operator, ...]
        Operators known only to this process (fl-server's own, for the keys it registers).
    """

    def __init__(self, path: Path, extra: tuple[Operator, ...] = ()) -> None:
        self.path = path
        self.extra = {op.name: op for op in extra}
        self._seen: tuple[int, int] | None = None
        self._operators: dict[str, Operator] = {}

    def get(self, name: str) -> Operator | None:
        """The operator called `name` as the file says now (None if there is none)."""
        return self.extra.get(name) or self.operators().get(name)

    def holder(self, kid: str) -> Operator | None:
        """The operator whose key has fingerprint `kid`, revoked or not (the newest first)."""
        found = [op for op in (*self.extra.values(), *self.operators().values())
                 if op.key_id == kid]  # fmt: skip
        return min(found, key=lambda op: op.revoked is not None, default=None)

    def operators(self) -> dict[str, Operator]:
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            self._seen, self._operators = None, {}
            return {}
        if self._seen != (stat.st_mtime_ns, stat.st_size):
            self._operators = _read(self.path)
            self._seen = (stat.st_mtime_ns, stat.st_size)
        return self._operators

    def add(self, name: str, role: str, public_key: str) -> Operator:
        """Add an operator (or give a revoked one a new key and role)."""
        check_name(name)
        if role not in ROLES:
            raise RegistryError(f"role {role!r}: one of {', '.join(ROLES)}")
        operators = dict(self.operators())
        if (old := operators.get(name)) is not None and old.revoked is None:
            raise RegistryError(f"operator {name!r} exists (role {old.role}); revoke it first")
        kid = key_id(parse_public_key(public_key, name))
        holder = next((op.name for op in operators.values()
                       if not op.revoked and op.key_id == kid), None)  # fmt: skip
        if holder is not None:
            raise RegistryError(f"that key already belongs to operator {holder!r}")
        operators[name] = Operator(name, role, public_key.strip(), _now())
        _write(self.path, operators)
        return operators[name]

    def revoke(self, name: str) -> Operator:
        operators = dict(self.operators())
        op = operators.get(name)
        if op is None or op.revoked is not None:
            raise RegistryError(f"no operator {name!r} to revoke")
        operators[name] = Operator(op.name, op.role, op.public_key, op.added, _now())
        _write(self.path, operators)
        return operators[name]


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _read(path: Path) -> dict[str, Operator]:
    try:
        entries = json.loads(path.read_text())["operators"]
        operators = {name: Operator(name=name, **fields) for name, fields in entries.items()}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise RegistryError(f"{path}: not an operator registry ({err})") from None
    for op in operators.values():
        if op.role not in ROLES:
            raise RegistryError(f"{path}: operator {op.name!r} has unknown role {op.role!r}")
    return operators


def _write(path: Path, operators: dict[str, Operator]) -> None:
    """Replace the file at once (a reader never sees half of it), readable by its owner only."""
    entries = {name: {k: v for k, v in asdict(op).items() if k != "name"}
               for name, op in sorted(operators.items())}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mode 0600
    with os.fdopen(fd, "w") as out:
        json.dump({"operators": entries}, out, indent=2)
        out.write("\n")
    os.replace(tmp, path)

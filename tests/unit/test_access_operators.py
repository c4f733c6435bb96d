"""The operator registry and the roles: what each role may do, exactly; adding, revoking
and reading again a file that changed."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fl_system.access.operators import (
    ADMIN,
    LIST,
    MANAGE,
    NODES,
    READ,
    STOP,
    SUBMIT,
    SUBMITTER,
    VIEWER,
    OperatorRegistry,
    RegistryError,
    allowed,
    key_id,
    parse_public_key,
    roles_for,
)
from fl_system.deploy.certs import operator_key_pair, supernode_key_pair

ACTIONS = (SUBMIT, LIST, READ, STOP, NODES, MANAGE)


def test_each_role_may_do_exactly_its_actions() -> None:
    table = {
        (role, own): {a for a in ACTIONS if allowed(role, a, own)}
        for role in (ADMIN, SUBMITTER, VIEWER, "nobody")
        for own in (False, True)
    }
    assert table == {
        (ADMIN, False): set(ACTIONS),
        (ADMIN, True): set(ACTIONS),
        (SUBMITTER, False): {SUBMIT, LIST},
        (SUBMITTER, True): {SUBMIT, LIST, READ, STOP},
        (VIEWER, False): {LIST, READ},
        (VIEWER, True): {LIST, READ},
        ("nobody", False): set(),
        ("nobody", True): set(),
    }
    assert roles_for(SUBMIT) == [ADMIN, SUBMITTER]
    assert roles_for(STOP) == [ADMIN]  # a submitter: its own runs only
    assert roles_for(NODES) == [ADMIN]


def _pub() -> str:
    return operator_key_pair()[1].decode()


def test_the_key_id_is_the_fingerprint_openssh_prints() -> None:
    # `ssh-keygen -lf` of this key (RFC 8032 test 1's public key) prints this fingerprint
    line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAINdamAGCsQq31Uv+08lkBzoO4XLz2qYjJa8CGmj3B1Ea"
    assert (
        key_id(parse_public_key(line, "t")) == "SHA256:bbXpuKG6zhzdmnxq256TlqzFBzRl2f6OOg722cYNbU8"
    )


def test_operators_are_added_revoked_and_read_again_when_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "state" / "operators.json"
    writer, reader = OperatorRegistry(path), OperatorRegistry(path)
    assert reader.get("ana") is None and reader.operators() == {}
    key = _pub()
    writer.add("ana", SUBMITTER, key)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    ana = reader.get("ana")
    assert (ana.role, ana.revoked) == (SUBMITTER, None)
    assert reader.holder(ana.key_id) == ana
    writer.revoke("ana")
    assert reader.get("ana").revoked is not None  # the next read sees the change
    assert reader.holder(ana.key_id).revoked is not None
    writer.add("ana", VIEWER, key)  # a revoked operator may come back, with a new role
    assert reader.get("ana").role == VIEWER
    stored = json.loads(path.read_text())["operators"]["ana"]
    assert stored["public_key"] == key.strip() and stored["revoked"] is None


def test_a_second_operator_with_a_name_or_key_in_use_is_refused(tmp_path: Path) -> None:
    reg = OperatorRegistry(tmp_path / "operators.json")
    key = _pub()
    reg.add("ana", ADMIN, key)
    with pytest.raises(RegistryError, match="operator 'ana' exists \\(role admin\\); revoke it"):
        reg.add("ana", VIEWER, _pub())
    with pytest.raises(RegistryError, match="that key already belongs to operator 'ana'"):
        reg.add("bo", VIEWER, key)
    with pytest.raises(RegistryError, match="no operator 'bo' to revoke"):
        reg.revoke("bo")


@pytest.mark.parametrize(
    ("name", "role", "key", "message"),
    [
        ("ana", "root", None, "role 'root': one of admin, submitter, viewer"),
        ("../x", ADMIN, None, "operator name '../x': letters, digits"),
        ("ana", ADMIN, "not a key", "ana: not an OpenSSH public key"),
        ("ana", ADMIN, "supernode", "ana: operator keys are Ed25519"),
    ],
)
def test_bad_operators_are_refused_naming_the_problem(
    tmp_path: Path, name: str, role: str, key: str | None, message: str
) -> None:
    reg = OperatorRegistry(tmp_path / "operators.json")
    if key == "supernode":
        key = supernode_key_pair()[1].decode()
    with pytest.raises(RegistryError, match=message.replace("(", "\\(")):
        reg.add(name, role, key or _pub())
    assert not (tmp_path / "operators.json").exists()


def test_a_broken_registry_file_is_reported_not_guessed(tmp_path: Path) -> None:
    path = tmp_path / "operators.json"
    path.write_text('{"operators": {"ana": {"role": "root", "public_key": "x", "added": "t"}}}')
    with pytest.raises(RegistryError, match="operator 'ana' has unknown role 'root'"):
        OperatorRegistry(path).get("ana")
    path.write_text("{")
    os.utime(path, ns=(1, 1))
    with pytest.raises(RegistryError, match="not an operator registry"):
        OperatorRegistry(path).get("ana")

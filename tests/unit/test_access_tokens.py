"""Operator tokens: accepted from a registered key only, and refused, with the reason, when
expired, forged, altered, revoked or from a key no operator holds."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import jwt
import pytest

from fl_system.access.operators import ADMIN, SUBMITTER, OperatorRegistry
from fl_system.access.tokens import (
    AUDIENCE,
    CLOCK_SKEW,
    TokenRefused,
    load_credential,
    mint,
    verify,
)
from fl_system.deploy.certs_cli import main as fl_certs


@pytest.fixture
def keys(tmp_path: Path) -> Path:
    for name in ("ana", "bo", "eve"):
        assert fl_certs([str(tmp_path), "--operator-key", name]) == 0
    return tmp_path


@pytest.fixture
def registry(tmp_path: Path, keys: Path) -> OperatorRegistry:
    reg = OperatorRegistry(tmp_path / "operators.json")
    reg.add("ana", ADMIN, (keys / "ana.pub").read_text())
    reg.add("bo", SUBMITTER, (keys / "bo.pub").read_text())
    return reg


def test_a_token_speaks_for_the_operator_holding_its_key(keys: Path, registry) -> None:
    assert oct((keys / "ana.key").stat().st_mode & 0o777) == "0o600"
    renamed = keys / "my-credential.key"  # the file's name does not matter, its key does
    renamed.write_bytes((keys / "bo.key").read_bytes())
    assert verify(mint(load_credential(keys / "ana.key"), 60), registry).name == "ana"
    assert verify(mint(load_credential(renamed), 60), registry).name == "bo"
    claims = jwt.decode(
        mint(load_credential(keys / "ana.key"), 60, now=1000.0),
        options={"verify_signature": False, "verify_exp": False},
    )
    assert claims == {"aud": AUDIENCE, "iat": 1000, "exp": 1060}


def test_refusals_say_why(keys: Path, registry: OperatorRegistry) -> None:
    ana, eve = load_credential(keys / "ana.key"), load_credential(keys / "eve.key")
    cases = {
        "": "the credential sent is not an operator token",
        "not.a.token": "the credential sent is not an operator token",
        mint(eve, 60): "no operator of this server holds the key SHA256:",
        mint(ana, 60, now=time.time() - 60 - CLOCK_SKEW - 5): "the token of operator 'ana' has "
        "expired",
        jwt.encode({"aud": AUDIENCE, "iat": 1, "exp": 2**40}, ana, algorithm="EdDSA"): "the "
        "token names no operator key",
        jwt.encode({"aud": "elsewhere", "iat": int(time.time()), "exp": 2**40}, ana,
                   algorithm="EdDSA", headers={"kid": registry.get("ana").key_id}): "the token "
        "of operator 'ana' is not valid: Audience doesn't match",
    }  # fmt: skip
    for token, reason in cases.items():
        with pytest.raises(TokenRefused) as refused:
            verify(token, registry)
        assert str(refused.value).startswith(reason), (token, refused.value)


def test_a_forged_or_altered_token_is_refused(keys: Path, registry: OperatorRegistry) -> None:
    ana, eve = load_credential(keys / "ana.key"), load_credential(keys / "eve.key")
    kid = registry.get("ana").key_id
    forged = jwt.encode(  # eve's signature under ana's key id
        {"aud": AUDIENCE, "iat": int(time.time()), "exp": 2**40}, eve, algorithm="EdDSA",
        headers={"kid": kid},
    )  # fmt: skip
    with pytest.raises(TokenRefused, match="'ana' is not valid: Signature verification failed"):
        verify(forged, registry)
    head, payload, signature = mint(ana, 60).split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["exp"] += 10**6  # one claim changed after signing
    altered = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    with pytest.raises(TokenRefused, match="Signature verification failed"):
        verify(".".join((head, altered, signature)), registry)


def test_a_revoked_operator_is_refused_at_its_next_call(keys: Path, registry) -> None:
    token = mint(load_credential(keys / "bo.key"), 3600)
    assert verify(token, registry).name == "bo"
    OperatorRegistry(registry.path).revoke("bo")  # another process (fl-server operators revoke)
    with pytest.raises(TokenRefused, match="operator 'bo' was revoked"):
        verify(token, registry)


def test_a_credential_that_is_no_operator_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no operator credential at"):
        load_credential(tmp_path / "missing.key")
    (tmp_path / "x.key").write_text("hello")
    with pytest.raises(ValueError, match="is not an operator credential"):
        load_credential(tmp_path / "x.key")
    assert fl_certs([str(tmp_path), "--node-key", "node"]) == 0  # an EC SuperNode key
    with pytest.raises(ValueError, match="operator credentials are Ed25519 keys"):
        load_credential(tmp_path / "node.key")

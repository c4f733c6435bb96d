"""An operator's Control API token: a JWT its own Ed25519 key signs (PyJWT, EdDSA).

The SuperLink holds only public keys, so nothing it stores lets anyone act as an operator.
A token names its key by fingerprint (`kid`), this project's Control API (`aud`), when it
was made and when it ends; at every call the server finds the operator holding that key,
refuses it if revoked, and checks the signature with the key.
"""

from __future__ import annotations

import time
from pathlib import Path

import jwt
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from fl_system.access.operators import Operator, OperatorRegistry, RegistryError, key_id

AUDIENCE = "fl_system-control-api"
CLOCK_SKEW = 60  # seconds a token's times may be off between two machines
RUN_LIFETIME = 30 * 24 * 3600  # fl-run's token: a run followed for up to 30 days


class TokenRefused(Exception):
    """A token the server does not accept; the message says why, for the caller."""


def load_credential(path: Path) -> ed25519.Ed25519PrivateKey:
    """The private key in a credential file (OpenSSH Ed25519, as fl-certs writes NAME.key);
    ValueError saying what is wrong with it otherwise."""
    try:
        key = serialization.load_ssh_private_key(path.read_bytes(), password=None)
    except FileNotFoundError:
        raise ValueError(f"no operator credential at {path}") from None
    except (OSError, ValueError, TypeError, UnsupportedAlgorithm) as err:
        raise ValueError(f"{path} is not an operator credential ({err})") from None
    if not isinstance(key, ed25519.Ed25519PrivateKey):
        raise ValueError(f"{path}: operator credentials are Ed25519 keys")
    return key


def mint(key: ed25519.Ed25519PrivateKey, lifetime: float, now: float | None = None) -> str:
    """A token of the operator holding `key`, valid for `lifetime` seconds from `now`."""
    issued = int(time.time() if now is None else now)
    claims = {"aud": AUDIENCE, "iat": issued, "exp": issued + int(lifetime)}
    kid = key_id(key.public_key())
    return jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": kid})


def verify(token: str, registry: OperatorRegistry) -> Operator:
    """The operator a token speaks for; TokenRefused saying why not."""
    try:
        kid = jwt.get_unverified_header(token).get("kid")
    except jwt.InvalidTokenError:
        raise TokenRefused("the credential sent is not an operator token") from None
    if not isinstance(kid, str):
        raise TokenRefused("the token names no operator key")
    try:
        op = registry.holder(kid)
    except RegistryError as err:
        raise TokenRefused(f"the server's operator registry cannot be read: {err}") from None
    if op is None:
        raise TokenRefused(f"no operator of this server holds the key {kid}")
    if op.revoked is not None:
        raise TokenRefused(f"operator {op.name!r} was revoked ({op.revoked})")
    try:
        jwt.decode(
            token,
            op.key(),
            algorithms=["EdDSA"],
            audience=AUDIENCE,
            leeway=CLOCK_SKEW,
            options={"require": ["aud", "iat", "exp"]},
        )
    except jwt.ExpiredSignatureError:
        raise TokenRefused(f"the token of operator {op.name!r} has expired") from None
    except jwt.InvalidTokenError as err:
        raise TokenRefused(f"the token of operator {op.name!r} is not valid: {err}") from None
    return op

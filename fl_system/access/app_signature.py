"""An app signed by its submitter, checked by every node before any of its code runs.

A Flower app travels as a FAB: a zip whose `.info/CONTENT` lists every file with its SHA-256.
The submitter signs that list (without the signature's own line) with its operator key and
puts the signature in the app as `fl-signature.json`, so that Flower's own `flwr run` carries
it: the signature is a JWT (PyJWT, EdDSA) naming the key by its fingerprint and the list by
its SHA-256. A node checks, on the FAB's bytes alone: every file is the one the list names,
the list is the one signed, and the key is one the node trusts. One byte changed anywhere
after signing, or a key the node does not trust, and the node refuses the run.
"""

from __future__ import annotations

import hashlib
import io
import json
import time
import zipfile
from dataclasses import dataclass

import jwt
from cryptography.hazmat.primitives.asymmetric import ed25519

from fl_system.access.operators import key_id

SIGNATURE_FILE = "fl-signature.json"
CONTENT = ".info/CONTENT"  # Flower's manifest inside a FAB: "path,sha256,size in bits" lines
AUDIENCE = "fl_system-app"


class AppRefused(Exception):
    """A FAB a node does not run; the message says why, for both logs."""


@dataclass(frozen=True)
class TrustedKey:
    """A key a node trusts to sign the apps it runs.

    Parameters
    ----------
    name : str
        How the node's log names it (its file's name).
    key : Ed25519PublicKey
        The operator's public key.
    """

    name: str
    key: ed25519.Ed25519PublicKey


def signed_lines(content: str) -> bytes:
    """The manifest lines a signature covers: all but the signature file's own."""
    lines = [line for line in content.splitlines() if line.split(",")[0] != SIGNATURE_FILE]
    return "\n".join(lines).encode()


def sign(content: str, key: ed25519.Ed25519PrivateKey, now: float | None = None) -> str:
    """`fl-signature.json`'s text: the signature of a FAB manifest (`content`, the text of
    `.info/CONTENT` of the FAB built without the signature)."""
    claims = {
        "aud": AUDIENCE,
        "manifest": hashlib.sha256(signed_lines(content)).hexdigest(),
        "iat": int(time.time() if now is None else now),
    }
    kid = key_id(key.public_key())
    token = jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": kid})
    return json.dumps({"signed_by": kid, "token": token}, indent=2) + "\n"


def check(fab: bytes, trusted: dict[str, TrustedKey]) -> TrustedKey:
    """The trusted key that signed `fab` (`trusted` by fingerprint); AppRefused otherwise."""
    try:
        with zipfile.ZipFile(io.BytesIO(fab)) as archive:
            files = {name: archive.read(name) for name in archive.namelist()}
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise AppRefused(f"the app is not a readable FAB ({err})") from None
    if CONTENT not in files:
        raise AppRefused("the app has no manifest (.info/CONTENT): not a FAB that flwr built")
    content = files.pop(CONTENT).decode(errors="replace")
    _check_files(files, content)
    if SIGNATURE_FILE not in files:
        raise AppRefused(f"the app is not signed (no {SIGNATURE_FILE}: fl-server sign APP)")
    try:
        token = json.loads(files[SIGNATURE_FILE])["token"]
        kid = jwt.get_unverified_header(token).get("kid")
    except (ValueError, KeyError, TypeError, jwt.InvalidTokenError):
        raise AppRefused(f"the app's {SIGNATURE_FILE} is not a signature") from None
    signer = trusted.get(kid) if isinstance(kid, str) else None
    if signer is None:
        raise AppRefused(f"the app is signed by key {kid}, which this node does not trust")
    try:
        claims = jwt.decode(token, signer.key, algorithms=["EdDSA"], audience=AUDIENCE)
    except jwt.InvalidTokenError as err:
        raise AppRefused(f"the app's signature by {signer.name} is not valid: {err}") from None
    if claims.get("manifest") != hashlib.sha256(signed_lines(content)).hexdigest():
        raise AppRefused(f"the app was changed after {signer.name} signed it")
    return signer


def _check_files(files: dict[str, bytes], content: str) -> None:
    """Every file of the FAB is the one its manifest names, and no other is there."""
    listed = {}
    for line in content.splitlines():
        path, digest, bits = line.rsplit(",", 2)
        listed[path] = (digest, bits)
    for path, data in files.items():
        if listed.get(path) != (hashlib.sha256(data).hexdigest(), str(len(data) * 8)):
            raise AppRefused(f"the app was changed after it was built: {path}")
    if missing := sorted(set(listed) - set(files)):
        raise AppRefused(f"the app lacks files its manifest lists: {', '.join(missing)}")

"""Signing an app's folder before `flwr run` builds it: `fl-server sign APP`, and fl-run's
own app when it submits with a credential (`fl_system.access.app_signature`)."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fl_system.access.app_signature import SIGNATURE_FILE, sign
from fl_system.flower import fab_manifest


class SigningError(ValueError):
    """An app folder that cannot be signed (the message says why)."""


def sign_app(app: Path, key: Ed25519PrivateKey) -> Path:
    """Write `app/fl-signature.json`, the signature by `key` of the FAB flwr builds from
    `app` (replacing an earlier signature); its path."""
    if not (app / "pyproject.toml").is_file():
        raise SigningError(f"{app} is not a Flower app (no pyproject.toml)")
    if moved := fab_manifest.problems():
        raise SigningError(f"cannot sign with this flwr: {'; '.join(moved)}")
    try:
        content = fab_manifest.manifest(app, SIGNATURE_FILE)
    except ValueError as err:
        raise SigningError(f"flwr cannot build {app}: {err}") from None
    if not any(line.startswith(f"{SIGNATURE_FILE},") for line in content.splitlines()):
        raise SigningError(
            f"{app}'s FAB would leave {SIGNATURE_FILE} out: add it to [tool.flwr.app] "
            "fab-include in its pyproject.toml"
        )
    path = app / SIGNATURE_FILE
    path.write_text(sign(content, key))
    return path

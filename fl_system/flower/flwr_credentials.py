"""Flower's CLI (`flwr run`, `flwr ls`, `flwr log`, `flwr stop`) sends an operator's token.

Flower's CLI sends the access token it holds for a connection's address as a bearer token
on every Control API call; `flwr login` fetches one from an OIDC provider. Our operators make
theirs from their own key, so this writes it where Flower keeps them: its credential store
(`$FLWR_HOME/credentials.yaml`, 0600), under the address, as the OIDC kind (the only kind
whose plugin sends a token). Flower asks for a refresh only when a token is refused, and our
SuperLink refreses refreshes: an operator makes a new token instead.
"""

from __future__ import annotations

import inspect
from pathlib import Path


def problems() -> list[str]:
    """What moved in the installed flwr of its CLI's credential store."""
    try:
        from flwr.cli import constant
        from flwr.cli.auth_plugin import oidc_cli_plugin
        from flwr.supercore.credential_store.file_credential_store import FileCredentialStore
    except ImportError as err:
        return [f"Flower's CLI credential store moved ({err})"]
    found = [
        f"flwr.cli.constant has no {name}"
        for name in ("AUTHN_TYPE_STORE_KEY", "ACCESS_TOKEN_STORE_KEY", "REFRESH_TOKEN_STORE_KEY")
        if not hasattr(constant, name)
    ]
    if "ACCESS_TOKEN_STORE_KEY % self.host" not in inspect.getsource(oidc_cli_plugin):
        found.append("Flower's OIDC CLI plugin no longer reads its token by the address")
    if not callable(getattr(FileCredentialStore, "set", None)):
        found.append("Flower's file credential store has no set")
    return found


def store_token(flwr_home: Path, address: str, token: str) -> Path:
    """Make Flower's CLI under `flwr_home` send `token` to the SuperLink at `address` (as
    written in its connection); the credential file."""
    from flwr.cli.constant import (
        ACCESS_TOKEN_STORE_KEY,
        AUTHN_TYPE_STORE_KEY,
        REFRESH_TOKEN_STORE_KEY,
    )
    from flwr.common.constant import AuthnType
    from flwr.supercore.credential_store.file_credential_store import FileCredentialStore

    path = flwr_home / "credentials.yaml"
    store = FileCredentialStore(path)
    store.set(AUTHN_TYPE_STORE_KEY % address, AuthnType.OIDC.encode())
    store.set(ACCESS_TOKEN_STORE_KEY % address, token.encode())
    store.set(REFRESH_TOKEN_STORE_KEY % address, token.encode())
    path.chmod(0o600)
    return path

"""Flower's own CLI plugin reads back the token we store for a connection, and sends it."""

from __future__ import annotations

from pathlib import Path

import pytest
from flwr.cli.utils import load_cli_auth_plugin_from_connection
from flwr.common.constant import ACCESS_TOKEN_KEY

from fl_system.flower import flwr_credentials


def test_flowers_cli_sends_the_token_stored_for_its_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert flwr_credentials.problems() == []
    path = flwr_credentials.store_token(tmp_path, "10.0.0.1:9092", "the-token")
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    monkeypatch.setattr(
        "flwr.supercore.credential_store.file_credential_store.CREDENTIAL_FILE_PATH", path
    )
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    plugin = load_cli_auth_plugin_from_connection("10.0.0.1:9092")
    plugin.load_tokens()
    assert dict(plugin.write_tokens_to_metadata([]))[ACCESS_TOKEN_KEY] == "the-token"
    other = load_cli_auth_plugin_from_connection("10.0.0.2:9092")  # another address: none
    other.load_tokens()
    assert type(other).__name__ == "NoOpCliAuthPlugin"

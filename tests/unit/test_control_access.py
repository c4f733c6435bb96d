"""The SuperLink's Control API with operators, in process (Flower's own app and middleware
stack, our plugin and middlewares in it): who is refused, what each role may call, and the
audit line of every call."""

from __future__ import annotations

import importlib
from pathlib import Path

import flwr.superlink.main as flwr_superlink_main
import pytest
from flwr.proto.control_pb2 import (
    ListNodesRequest,
    ListRunsRequest,
    StartRunRequest,
    StopRunRequest,
    StreamLogsRequest,
)
from starlette.middleware import Middleware
from starlette.testclient import TestClient

from fl_system.access import audit
from fl_system.access.control_api import ControlAudit, ControlAuthorization, OperatorAuthn
from fl_system.access.operators import ADMIN, SUBMITTER, VIEWER, OperatorRegistry
from fl_system.access.tokens import load_credential, mint
from fl_system.deploy.certs_cli import main as fl_certs
from fl_system.flower import operator_access

flwr_superlink_cli = importlib.import_module(operator_access.SUPERLINK_MAIN)


@pytest.fixture
def federation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(a client of the app, registry, audit path, {name: token})."""
    for module in (flwr_superlink_main, flwr_superlink_cli):
        monkeypatch.setattr(module, "load_control_authn_plugin", module.load_control_authn_plugin)
    monkeypatch.setattr(flwr_superlink_main, "_get_middleware", flwr_superlink_main._get_middleware)
    reg = OperatorRegistry(tmp_path / "operators.json")
    tokens = {}
    for name, role in (("ana", ADMIN), ("sam", SUBMITTER), ("vic", VIEWER), ("eve", None)):
        assert fl_certs([str(tmp_path), "--operator-key", name]) == 0
        if role:
            reg.add(name, role, (tmp_path / f"{name}.pub").read_text())
        tokens[name] = mint(load_credential(tmp_path / f"{name}.key"), 60)
    log = audit.AuditLog(tmp_path / "audit.jsonl")
    log.append(audit.entry("sam", SUBMITTER, "start-run", audit.OK, run_id=7))  # sam's run 7
    plugin = OperatorAuthn(reg)
    operator_access.install(
        plugin,
        Middleware(ControlAudit, log=log),
        Middleware(ControlAuthorization, registry=reg, log=log),
    )
    monkeypatch.setattr(flwr_superlink_main, "load_control_authn_plugin", lambda: plugin)
    assert operator_access.problems() == []
    with TestClient(flwr_superlink_main.create_app()) as client:
        yield client, reg, log.path, tokens


def _call(client: TestClient, path: str, message, token: str | None):
    headers = {"content-type": "application/protobuf"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    return client.post(f"/v1/control/{path}", content=message.SerializeToString(), headers=headers)


def test_each_caller_is_answered_as_its_role_allows(federation) -> None:
    client, reg, audit_path, tokens = federation
    calls = [
        ("list-runs", ListRunsRequest(), None),
        ("list-runs", ListRunsRequest(), "eve"),
        ("list-runs", ListRunsRequest(), "vic"),
        ("list-nodes", ListNodesRequest(), "vic"),
        ("start-run", StartRunRequest(), "vic"),
        ("stop-run", StopRunRequest(run_id=8), "sam"),
        ("stream-logs", StreamLogsRequest(run_id=8), "sam"),
        ("stop-run", StopRunRequest(run_id=7), "sam"),
        ("list-runs", ListRunsRequest(), "ana"),
    ]
    statuses = [_call(client, path, message, tokens.get(who)).status_code
                for path, message, who in calls]  # fmt: skip
    # sam's stop of its own run 7 passes the checks and reaches Flower, which has no run 7
    assert statuses == [401, 401, 200, 200, 403, 403, 403, 404, 200]
    refusal = _call(client, "start-run", StartRunRequest(), tokens["vic"]).json()
    assert refusal["extra"] == (
        "operator 'vic' (viewer) may not: submitting a run needs role admin or submitter"
    )
    reg.revoke("vic")
    revoked = _call(client, "list-runs", ListRunsRequest(), tokens["vic"])
    assert revoked.status_code == 401 and "operator 'vic' was revoked" in revoked.json()["extra"]
    lines = list(audit.read(audit_path))[1:]  # after the fixture's own line
    seen = [
        (line["who"], line["role"], line["what"], line["run_id"], line["result"][:18])
        for line in lines
    ]
    assert seen == [
        ("-", "-", "list-runs", None, "refused: this Supe"),
        ("-", "-", "list-runs", None, "refused: no operat"),
        ("vic", "viewer", "list-runs", None, "ok"),
        ("vic", "viewer", "list-nodes", None, "ok"),
        ("vic", "viewer", "start-run", None, "refused: operator "),
        ("sam", "submitter", "stop-run", 8, "refused: operator "),
        ("sam", "submitter", "stream-logs", 8, "refused: operator "),
        ("sam", "submitter", "stop-run", 7, "error: Run 7 not f"),
        ("ana", "admin", "list-runs", None, "ok"),
        ("vic", "viewer", "start-run", None, "refused: operator "),
        ("-", "-", "list-runs", None, "refused: operator "),
    ]
    assert lines[5]["result"] == (
        "refused: operator 'sam' (submitter) may not: stopping a run 8 was submitted by another "
        "operator; needs role admin"
    )
    assert oct(audit_path.stat().st_mode & 0o777) == "0o600"

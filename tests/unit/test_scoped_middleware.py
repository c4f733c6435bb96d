"""The SuperLink's Control- and Fleet-only middlewares skip the other APIs' requests, and every
request is answered exactly as by Flower's own middleware stack."""

from __future__ import annotations

from typing import ClassVar

import flwr.superlink.main as flwr_superlink_main
import pytest
from flwr.superlink.routers.fleet.node_auth import NodeAuthMiddleware
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import PlainTextResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from fl_system.flower import scoped_middleware

# one request of each API (and none), with no credentials: each refused or answered its way
REQUESTS = [
    ("GET", "/health"),
    ("POST", "/v1/control/list-runs"),
    ("POST", "/v1/control/start-run"),
    ("POST", "/v1/fleet/pull-messages"),
    ("POST", "/v1/fleet/send-node-heartbeat"),
    ("POST", "/v1/runtime/get-nodes"),
    ("POST", "/v1/fleet/no-such-call"),
]


@pytest.fixture(autouse=True)
def unhooked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(flwr_superlink_main, "_get_middleware", flwr_superlink_main._get_middleware)


def _answers() -> list[tuple[int, bytes]]:
    """Flower's SuperLink app, as this process builds it, answering REQUESTS."""
    answers = []
    with TestClient(flwr_superlink_main.create_app()) as client:
        for method, path in REQUESTS:
            headers = {"content-type": "application/protobuf"}
            response = client.request(method, path, content=b"", headers=headers)
            body = response.content
            if path == "/v1/control/list-runs":  # a run list carries the time it was made
                body = body[:2]
            answers.append((response.status_code, body))
    return answers


def test_every_api_is_answered_as_by_flowers_own_stack() -> None:
    before = _answers()
    scoped_middleware.scope_to_their_api()
    scoped_middleware.scope_to_their_api()  # installed once
    after = _answers()
    assert [status for status, _ in before] == [200, 200, 500, 401, 401, 401, 404]
    assert after == before
    stack = flwr_superlink_main._get_middleware()
    assert sum(mw.cls is scoped_middleware.Scoped for mw in stack) == 6


class Recorder(BaseHTTPMiddleware):
    seen: ClassVar[list[str]] = []

    async def dispatch(self, request, call_next):  # type: ignore[no-untyped-def]
        Recorder.seen.append(request.url.path)
        return await call_next(request)


def test_a_scoped_middleware_sees_only_its_apis_requests() -> None:
    Recorder.seen = []
    app = Starlette(
        routes=[Route("/{path:path}", lambda _: PlainTextResponse("ok"), methods=["POST"])],
        middleware=[Middleware(scoped_middleware.Scoped, Recorder, "/v1/fleet/")],
    )
    with TestClient(app) as client:
        for path in ("/v1/fleet/pull-messages", "/v1/runtime/pull-messages", "/v1/fleetx"):
            assert client.post(path).text == "ok"
    assert Recorder.seen == ["/v1/fleet/pull-messages"]


def test_the_installed_flwr_has_what_is_scoped() -> None:
    assert scoped_middleware.problems() == []


def test_a_middleware_gone_or_acting_on_every_path_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stack = flwr_superlink_main._get_middleware
    monkeypatch.setattr(
        flwr_superlink_main,
        "_get_middleware",
        lambda: [mw for mw in stack() if mw.cls is not NodeAuthMiddleware],
    )
    assert scoped_middleware.problems() == [
        "the SuperLink's middlewares no longer include "
        "flwr.superlink.routers.fleet.node_auth.NodeAuthMiddleware"
    ]
    monkeypatch.setattr(flwr_superlink_main, "_get_middleware", stack)

    async def dispatch(self, request, call_next):  # type: ignore[no-untyped-def]
        return await call_next(request)  # every path now

    monkeypatch.setattr(NodeAuthMiddleware, "dispatch", dispatch)
    assert scoped_middleware.problems() == [
        "NodeAuthMiddleware no longer acts only on /v1/fleet/ paths"
    ]
    monkeypatch.delattr(flwr_superlink_main, "_get_middleware")
    assert scoped_middleware.problems() == ["flwr.superlink.main has no _get_middleware"]

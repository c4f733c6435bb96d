"""The SuperLink's HTTP middlewares run only for the API each one serves.

Flower 1.42 wraps every request to its SuperLink (a node's poll, each object pulled or
pushed, every Runtime API call of a ServerApp) in eight `BaseHTTPMiddleware` layers; each
layer costs a task group and a pair of memory streams per request even when it only hands the
request on. Six of them act only on one API's paths (four on the Control API's, two on the
Fleet API's) and hand every other request on untouched, so this wraps each of those six in a
plain ASGI check of the path: a Fleet request passes four layers, a Runtime API request two.
With 10 SuperNodes training the mnist5k CNN, a round took 15 % less (`benchmarks/round_overhead`).
Which requests each middleware acts on, and what it does with them, is Flower's own code.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

from starlette.datastructures import URL
from starlette.middleware import Middleware

CONTROL, FLEET = "/v1/control/", "/v1/fleet/"
# module, class, the path prefix it acts on, and the test its dispatch starts with
SCOPED = (
    ("flwr.superlink.routers.control.middlewares", "ControlSensitiveResponseMiddleware",
     CONTROL, "_is_control_sensitive_route(request)"),
    ("flwr.superlink.routers.control.middlewares", "ControlAuthenticationMiddleware",
     CONTROL, "if not _is_control_path(request.url.path)"),
    ("flwr.superlink.routers.control.middlewares", "ControlLicenseMiddleware",
     CONTROL, "not _is_control_path(request.url.path)"),
    ("flwr.superlink.routers.control.middlewares", "ControlEventLogMiddleware",
     CONTROL, "if not _is_control_path(request.url.path)"),
    ("flwr.superlink.routers.fleet.node_auth", "NodeAuthMiddleware",
     FLEET, 'if request.url.path.startswith("/v1/fleet/")'),
    ("flwr.superlink.routers.fleet.middlewares", "FleetEventLogMiddleware",
     FLEET, 'if not request.url.path.startswith("/v1/fleet/")'),
)  # fmt: skip
APP_MODULE = "flwr.superlink.main"
INSTALLED = "scoped_to_their_api"


class Scoped:
    """ASGI middleware: `middleware` for requests under `prefix`, the app itself otherwise.

    Parameters
    ----------
    app : ASGI application
        What comes next in the stack.
    middleware : type
        Flower's middleware class, built on `app` with `args` and `kwargs`.
    prefix : str
        The paths it acts on; it hands every other request on unchanged.
    """

    def __init__(self, app: Any, middleware: type, prefix: str, *args: Any, **kwargs: Any):
        self.app = app
        self.inner = middleware(app, *args, **kwargs)
        self.prefix = prefix

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not URL(scope=scope).path.startswith(self.prefix):
            await self.app(scope, receive, send)
        else:
            await self.inner(scope, receive, send)


def _scopes() -> dict[type, str]:
    return {
        getattr(importlib.import_module(module), name): prefix for module, name, prefix, _ in SCOPED
    }


def problems() -> list[str]:
    """What moved in the installed flwr of the SuperLink's middlewares."""
    main = importlib.import_module(APP_MODULE)
    get = getattr(main, "_get_middleware", None)
    if not callable(get):
        return [f"{APP_MODULE} has no _get_middleware"]
    stack = [mw.cls for mw in get()]
    found = []
    for module, name, prefix, test in SCOPED:
        cls = getattr(importlib.import_module(module), name, None)
        if cls is None or cls not in stack:
            found.append(f"the SuperLink's middlewares no longer include {module}.{name}")
        elif test not in inspect.getsource(cls.dispatch):
            found.append(f"{name} no longer acts only on {prefix} paths")
    routes = importlib.import_module(SCOPED[0][0]).CONTROL_SENSITIVE_ROUTE_KEYS
    if not all(path.startswith(CONTROL) for _, path in routes):
        found.append(f"a sensitive Control route lies outside {CONTROL}")
    return found


def scope_to_their_api() -> None:
    """Make the SuperLink this process builds wrap its API-specific middlewares in `Scoped`."""
    main = importlib.import_module(APP_MODULE)
    if not getattr(main._get_middleware, INSTALLED, False):
        main._get_middleware = _scoping(main._get_middleware)


def _scoping(get: Callable[[], list[Middleware]]) -> Callable[[], list[Middleware]]:
    def get_middleware() -> list[Middleware]:
        scopes = _scopes()
        return [
            Middleware(Scoped, mw.cls, scopes[mw.cls], *mw.args, **mw.kwargs)
            if mw.cls in scopes
            else mw
            for mw in get()
        ]

    setattr(get_middleware, INSTALLED, True)
    return get_middleware

"""The SuperLink this process starts authenticates Control API calls with a plugin of ours
and runs two middlewares of ours around Flower's: `fl_system.access.control_api`'s
operators, roles and audit log.

Flower 1.42 has the interface (a `ControlAuthnPlugin`) but picks its plugin in
`load_control_authn_plugin`, which offers only its no-op one and an enterprise OIDC one, and
builds its middleware stack in `flwr.superlink.main._get_middleware`, with no place for an
authorisation step. So this replaces the loader the SuperLink's main calls and inserts two
middlewares into the stack: the audit just inside Flower's error translation (it sees the
refusals of Flower's authentication as they pass), the authorisation just after Flower's
request parsing (it reads the run a call names); both only on Control API paths (`Scoped`).
A Flower defect it works around: a plugin cannot be configured without Flower Enterprise,
and authorisation has no hook of its own.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

from starlette.middleware import Middleware

from fl_system.flower.scoped_middleware import CONTROL, Scoped

SUPERLINK_MAIN = "flwr.superlink.cli.flower_superlink"
APP_MODULE = "flwr.superlink.main"
INSTALLED = "with_operator_access"


def _flower() -> tuple[object, object, type, type, Callable]:
    from flwr.supercore.error.http import http_error_translator
    from flwr.supercore.protobuf.translation import ProtobufTranslationMiddleware
    from flwr.superlink.routers.control.middlewares import ControlAuthenticationMiddleware

    return (
        importlib.import_module(SUPERLINK_MAIN),
        importlib.import_module(APP_MODULE),
        ControlAuthenticationMiddleware,
        ProtobufTranslationMiddleware,
        http_error_translator,
    )


def problems() -> list[str]:
    """What moved in the installed flwr of the SuperLink's authentication and middlewares."""
    try:
        superlink, main, authn, parsing, translator = _flower()
    except ImportError as err:
        return [f"the SuperLink's Control API middlewares moved ({err})"]
    found = []
    if "authn_plugin = load_control_authn_plugin()" not in inspect.getsource(superlink):
        found.append(f"{SUPERLINK_MAIN} no longer loads its plugin by load_control_authn_plugin")
    get = getattr(main, "_get_middleware", None)
    if not callable(get):
        return [*found, f"{APP_MODULE} has no _get_middleware"]
    stack = get()
    classes = [mw.cls for mw in stack]
    if authn not in classes or parsing not in classes:
        found.append("the SuperLink's middlewares no longer include authentication and parsing")
    elif not any(mw.kwargs.get("dispatch") is translator for mw in stack):
        found.append("the SuperLink no longer translates errors in a middleware")
    elif classes.index(authn) > classes.index(parsing):
        found.append("the SuperLink parses Control API requests before authenticating them")
    return found


def install(plugin: object, outer: Middleware, inner: Middleware) -> None:
    """Make the SuperLink this process starts authenticate Control API calls with `plugin`
    (a `ControlAuthnPlugin`), run `outer` (for Control API paths only) just inside Flower's
    error translation, so that it sees Flower's refusals as exceptions, and `inner` just
    after Flower parses the request, so that it sees the caller's account and the request."""
    superlink, main, _, parsing, translator = _flower()
    superlink.load_control_authn_plugin = lambda: plugin
    get = main._get_middleware
    if getattr(get, INSTALLED, False):
        return

    def scoped(mw: Middleware) -> Middleware:
        return Middleware(Scoped, mw.cls, CONTROL, *mw.args, **mw.kwargs)

    def get_middleware() -> list[Middleware]:
        stack: list[Middleware] = []
        for mw in get():
            stack.append(mw)
            if mw.kwargs.get("dispatch") is translator:
                stack.append(scoped(outer))
            elif mw.cls is parsing:
                stack.append(scoped(inner))
        return stack

    setattr(get_middleware, INSTALLED, True)
    main._get_middleware = get_middleware

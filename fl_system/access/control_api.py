"""Operators on the SuperLink's Control API: who each caller is, what its role lets it do,
and a line in the audit log for every call.

Three parts, each on Flower's own interface for it:
- `OperatorAuthn`, a `ControlAuthnPlugin` (Flower's account authentication): the bearer
  token every Control API call carries is checked against the operator registry
  (`fl_system.access.tokens`); no token, an unknown, revoked or forged one is refused with
  the reason, and nothing runs. Every operator acts in Flower's one open-source account
  (its federation manager admits no other), under its own name.
- `ControlAuthorization`, a middleware after Flower's authentication and request parsing:
  the call's action (`ACTIONS`) against the operator's role, a submitter's reads and stops
  against the run's owner; a refusal names the role the call needs.
- `ControlAudit`, a middleware before Flower's authentication (so refused callers are logged
  too; Flower's own event log only sees authenticated ones): the audit line of each call.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from flwr.common.constant import ACCESS_TOKEN_KEY, NOOP_FLWR_AID, REFRESH_TOKEN_KEY
from flwr.supercore.auth.typing import (
    AccountAuthCredentials,
    AccountAuthLoginDetails,
    AccountInfo,
)
from flwr.supercore.error import ApiErrorCode, FlowerError
from flwr.superlink.auth_plugin import ControlAuthnPlugin
from starlette.concurrency import run_in_threadpool
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response

from fl_system.access import audit
from fl_system.access.app_signature import SIGNATURE_FILE, AppRefused, TrustedKey, check
from fl_system.access.operators import (
    DOING,
    LIST,
    MANAGE,
    NODES,
    READ,
    STOP,
    SUBMIT,
    Operator,
    OperatorRegistry,
    allowed,
    roles_for,
)
from fl_system.access.tokens import TokenRefused, verify

CONTROL = "/v1/control/"
# Flower's own login calls: they carry no token (Flower does not authenticate them either)
LOGIN_CALLS = frozenset({"get-login-details", "get-auth-tokens", "refresh-auth-tokens"})
ACTIONS = {
    "start-run": SUBMIT,
    "list-runs": LIST,
    "list-nodes": LIST,
    "list-federations": LIST,
    "stream-logs": READ,
    "stream-run-events": READ,
    "pull-artifacts": READ,
    "stop-run": STOP,
    "register-node": NODES,
    "unregister-node": NODES,
}  # every other Control API call: MANAGE (admins only)
NO_CREDENTIAL = (
    "this SuperLink takes Control API calls from its operators only, and none was sent "
    "(fl-run: runtime.credential=NAME.key; flwr: fl-server login NAME.key first)"
)


class Refused(FlowerError):
    """A call refused for who sent it; `public_details` is the reason, told to the caller."""

    def __init__(self, code: ApiErrorCode, reason: str) -> None:
        super().__init__(code, reason, public_details=reason)


class OperatorAuthn(ControlAuthnPlugin):
    """Flower's Control API authentication by operator tokens.

    Parameters
    ----------
    registry : OperatorRegistry
        Who the operators are, read again whenever its file changes.
    """

    def __init__(self, registry: OperatorRegistry) -> None:
        self.registry = registry

    def get_login_details(self) -> AccountAuthLoginDetails | None:
        return None  # no login through the SuperLink: a token is made from the operator's key

    def validate_tokens_in_metadata(
        self, metadata: Sequence[tuple[str, str | bytes]]
    ) -> tuple[bool, AccountInfo | None]:
        return True, self._account(metadata, ACCESS_TOKEN_KEY)[0]

    def _account(
        self, metadata: Sequence[tuple[str, str | bytes]], name: str
    ) -> tuple[AccountInfo, str | bytes]:
        """(the account, the token) of the token `name` in `metadata`; Refused otherwise."""
        token = next((v for k, v in metadata if k == name), None)
        if not token:
            raise Refused(ApiErrorCode.ACCOUNT_AUTHENTICATION_FAILED, NO_CREDENTIAL)
        try:
            op = verify(token.decode() if isinstance(token, bytes) else token, self.registry)
        except TokenRefused as err:
            raise Refused(ApiErrorCode.ACCOUNT_AUTHENTICATION_FAILED, str(err)) from None
        return AccountInfo(flwr_aid=NOOP_FLWR_AID, account_name=op.name), token

    def get_auth_tokens(self, device_code: str) -> AccountAuthCredentials | None:
        return None

    def refresh_tokens(
        self, metadata: Sequence[tuple[str, str | bytes]]
    ) -> tuple[Sequence[tuple[str, str | bytes]] | None, AccountInfo | None]:
        """Flower's CLI asks for a refresh when its token is refused: the same token again if
        it is good, else the reason it is not (a token ends; its operator makes a new one)."""
        account, token = self._account(metadata, REFRESH_TOKEN_KEY)
        return [(ACCESS_TOKEN_KEY, token), (REFRESH_TOKEN_KEY, token)], account


def call_name(request: Request) -> str | None:
    """The Control API call a request makes ("start-run"), None for any other request."""
    path = request.url.path
    return path[len(CONTROL) :] if path.startswith(CONTROL) else None


class ControlAuthorization(BaseHTTPMiddleware):
    """Refuses a Control API call the caller's role does not allow (see module docstring)."""

    def __init__(self, app, registry: OperatorRegistry, log: audit.AuditLog) -> None:
        super().__init__(app)
        self.registry, self.log = registry, log

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        name = call_name(request)
        if name is None or name in LOGIN_CALLS:
            return await call_next(request)
        account = getattr(request.state, "account", None)
        op = self.registry.get(account.account_name) if account else None
        if op is None:  # Flower authenticated the call, so only a removal in between
            raise Refused(ApiErrorCode.ACCOUNT_AUTHENTICATION_FAILED, "unknown operator")
        request.state.operator = op
        parsed = getattr(request.state, "protobuf_request", None)
        run_id = _run_id(parsed)
        action = ACTIONS.get(name, MANAGE)
        own = run_id is not None and self.log.owner(run_id) == op.name
        if not allowed(op.role, action, own):
            raise Refused(ApiErrorCode.NO_PERMISSIONS, refusal(op, action, run_id))
        if name == "start-run" and parsed is not None:
            request.state.fab_hash = hashlib.sha256(parsed.fab.content).hexdigest()
            # unzipping the app is work: off the event loop, as Flower keeps its plugins' I/O
            request.state.signer = await run_in_threadpool(
                signer_of, parsed.fab.content, self.registry
            )
        response = await call_next(request)
        started = getattr(request.state, "protobuf_response", None)
        if name == "start-run" and started is not None:
            request.state.run_id = int(started.run_id)
        return response


def signer_of(fab: bytes, registry: OperatorRegistry) -> str:
    """The operator whose key signed `fab` ("unsigned", or why its signature is none of
    theirs, otherwise): what the nodes that trust the operators will find."""
    keys = {op.key_id: TrustedKey(op.name, op.key())
            for op in registry.operators().values() if op.revoked is None}  # fmt: skip
    try:
        return check(fab, keys).name
    except AppRefused as err:
        return "unsigned" if f"no {SIGNATURE_FILE}" in str(err) else f"none: {err}"


def refusal(op: Operator, action: str, run_id: int | None) -> str:
    """Why `op` may not do `action`, naming the roles that may."""
    needs = " or ".join(roles_for(action))
    if allowed(op.role, action, own=True):  # its own runs only
        return (f"operator {op.name!r} ({op.role}) may not: {DOING[action]} {run_id} was "
                f"submitted by another operator; needs role {needs}")  # fmt: skip
    return f"operator {op.name!r} ({op.role}) may not: {DOING[action]} needs role {needs}"


class ControlAudit(BaseHTTPMiddleware):
    """Writes each Control API call's audit line once its answer is decided."""

    def __init__(self, app, log: audit.AuditLog) -> None:
        super().__init__(app)
        self.log = log

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        name = call_name(request)
        if name is None:
            return await call_next(request)
        try:
            response = await call_next(request)
        except Refused as err:
            await run_in_threadpool(self._write, request, name, f"refused: {err.public_details}")
            raise
        except FlowerError as err:
            await run_in_threadpool(self._write, request, name, f"error: {err.message}")
            raise
        status = response.status_code
        result = audit.OK if status < 400 else f"error: HTTP {status}"
        await run_in_threadpool(self._write, request, name, result)
        return response

    def _write(self, request: Request, name: str, result: str) -> None:
        state = request.state
        op: Operator | None = getattr(state, "operator", None)
        account = getattr(state, "account", None)
        who = op.name if op else (account.account_name if account else "-")
        run_id = getattr(state, "run_id", None)
        if run_id is None:
            run_id = _run_id(getattr(state, "protobuf_request", None))
        fab, signer = getattr(state, "fab_hash", ""), getattr(state, "signer", "")
        line = audit.entry(who, op.role if op else "-", name, result, run_id, fab, signer)
        self.log.append(line)


def _run_id(parsed: object) -> int | None:
    """The run a parsed request names, if it names one."""
    if parsed is None or "run_id" not in type(parsed).DESCRIPTOR.fields_by_name:
        return None
    if parsed.DESCRIPTOR.fields_by_name["run_id"].has_presence and not parsed.HasField("run_id"):
        return None
    return int(parsed.run_id)

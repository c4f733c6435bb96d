"""`fl-superlink`: Flower's SuperLink, taking `flower-superlink`'s arguments, that accepts
SuperNode heartbeats down to 1 s apart (Flower: 10), so that a killed SuperNode is noticed
within seconds (see `flwr_hooks.set_node_heartbeat`), that ends at once the work a node's
previous process left when the node comes back (`returning_nodes`), whose SQL state
(`fl-server`'s) skips the SQL of calls that need none (`sql_state`), that wakes the
ServerApp launcher at FL_LAUNCHER_SOCKET when a run is created and each SuperNode with a
socket in FL_NODE_WAKE_DIR when a message for it is stored (`wakeups`), and whose
Control- and Fleet-only HTTP middlewares skip the other APIs' requests (`scoped_middleware`),
and that, given FL_OPERATORS, takes Control API calls from those operators only, as their
roles allow, writing each to the audit log FL_AUDIT_LOG (`operator_access`).

Its log leaves out the lines Flower writes for every poll and every reply of every node
(several a second, which buried everything else in `docker compose logs`), unless
FL_LOG_LEVEL=debug; FL_LOG_LEVEL=warning keeps warnings and errors only."""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence

LOG_ENV = "FL_LOG_LEVEL"
# set by fl-server: the operator registry (Control API calls from its operators only), the
# audit log, and fl-server's own operator key (one OpenSSH line: it registers SuperNode keys)
OPERATORS_ENV, AUDIT_ENV, OWN_KEY_ENV = "FL_OPERATORS", "FL_AUDIT_LOG", "FL_SERVER_OPERATOR_KEY"
OWN_OPERATOR = "fl-server"  # the operator fl-server itself is, for the SuperNode keys it registers
LOG_LEVELS = ("debug", "info", "warning")
PER_NODE_LINES = ("[Fleet.PullMessages]", "[Fleet.PushMessages]")  # each poll, each reply


def quiet_polls(record: logging.LogRecord) -> bool:
    """A logging filter: False for Flower's lines about one node's poll or reply."""
    return not str(record.msg).startswith(PER_NODE_LINES)


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    level = os.environ.get(LOG_ENV, "info").lower()
    if level not in LOG_LEVELS:
        print(
            f"fl-superlink: error: {LOG_ENV} must be one of {', '.join(LOG_LEVELS)}, got {level!r}",
            file=sys.stderr,
        )
        return 2
    from flwr.supercore.logger import update_console_handler

    from fl_system.flower import (
        FlwrInternalsChanged,
        flwr_hooks,
        operator_access,
        raise_if,
        returning_nodes,
        scoped_middleware,
        sql_state,
        wakeups,
    )
    from fl_system.runtime import flwr_check
    from fl_system.runtime.supernode.launcher import SOCKET_ENV

    update_console_handler(level=level.upper())
    if level != "debug":
        logging.getLogger("flwr").addFilter(quiet_polls)

    try:
        flwr_check.check()
        # the SuperLink's state (SQLAlchemy) and its HTTP app: here only
        raise_if(
            returning_nodes.problems()
            + sql_state.problems()
            + wakeups.problems()
            + scoped_middleware.problems()
            + operator_access.problems()
        )
    except FlwrInternalsChanged as err:
        print(f"fl-superlink: error: {err}", file=sys.stderr, flush=True)
        return 2
    returning_nodes.end_work_of_returning_nodes()
    sql_state.cheaper_calls()
    if registry := os.environ.get(OPERATORS_ENV):
        _require_operators(registry)
    scoped_middleware.scope_to_their_api()
    if launcher_socket := os.environ.get(SOCKET_ENV):
        wakeups.wake_on_new_runs(launcher_socket)
    if node_wake_dir := os.environ.get(wakeups.NODE_WAKE_DIR_ENV):
        wakeups.wake_nodes_on_messages(node_wake_dir)
    flwr_hooks.run_superlink(list(sys.argv[1:] if argv is None else argv))
    return 0


def _require_operators(registry_path: str) -> None:
    from pathlib import Path

    from starlette.middleware import Middleware

    from fl_system.access.audit import AuditLog
    from fl_system.access.control_api import ControlAudit, ControlAuthorization, OperatorAuthn
    from fl_system.access.operators import ADMIN, Operator, OperatorRegistry
    from fl_system.flower import operator_access

    own = os.environ.get(OWN_KEY_ENV)
    extra = (Operator(OWN_OPERATOR, ADMIN, own, "at start"),) if own else ()
    registry = OperatorRegistry(Path(registry_path), extra)
    audit_path = Path(os.environ.get(AUDIT_ENV) or Path(registry_path).with_name("audit.jsonl"))
    log = AuditLog(audit_path)
    operator_access.install(
        OperatorAuthn(registry),
        Middleware(ControlAudit, log=log),
        Middleware(ControlAuthorization, registry=registry, log=log),
    )


if __name__ == "__main__":
    sys.exit(main())

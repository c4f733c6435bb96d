"""What this project relies on inside flwr that is not public API, each hook checked against
the installed version: `flwr_hooks` (SuperNode, SuperLink, wire sizes), `flwr_engine` (the
simulation engine), `flwr_tasks` (the ClientApp launcher's tasks), `object_pulls` (retries of
objects still uploading), `returning_nodes` (the SuperLink ends a restarted node's old work),
`wakeups` (the SuperLink wakes the ServerApp launcher per new run, a local SuperNode per
message), `scoped_middleware` (the SuperLink's Control- and Fleet-only middlewares skip other
requests), `sql_state` (the SQL SuperLink skips the SQL of calls that need none),
`stranded_replies` (a SuperNode drops a stopped run's message and sends every reply it
holds), `operator_access` (the SuperLink's Control API authenticates, authorises and audits
with our plugin and middlewares), `flwr_credentials` (Flower's CLI sends an operator's
token), `fab_manifest` (the manifest of the FAB `flwr run` builds, for signing),
`app_checks` (a SuperNode refuses a run its site does not accept, before taking it),
`telemetry_off` (no work for Flower's events when telemetry is off)."""

from __future__ import annotations


class FlwrInternalsChanged(RuntimeError):
    """The installed flwr no longer has what this project relies on."""


def raise_if(problems: list[str]) -> None:
    """FlwrInternalsChanged naming every problem found, if any."""
    if problems:
        raise FlwrInternalsChanged(
            "the installed flwr differs from the 1.42 internals fl_system relies on: "
            + "; ".join(problems)
        )

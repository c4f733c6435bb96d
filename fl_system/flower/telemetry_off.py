"""No telemetry work when telemetry is off.

Flower's `event()` builds its telemetry event on a thread even when FLWR_TELEMETRY_ENABLED=0,
where it then sends nothing: a source id read from the home directory, and platform probes
that run `file` and `uname -p` as subprocesses, forked from a process that may hold torch.
Every ClientApp task fires one (`run_clientapp`), as do the SuperLink, the SuperNode and the
ServerApp: measured ~120 ms of CPU for a process's first event, more than a small client's
local training, on every client of every round. `install()` makes an event cost nothing when
telemetry is off (our processes turn it off: `processes.tool_env`); with it on, Flower's own.
"""

from __future__ import annotations

TELEMETRY_ENV = "FLWR_TELEMETRY_ENABLED"


def problems() -> list[str]:
    """What moved in the installed flwr of its telemetry."""
    from flwr.supercore import telemetry

    found = []
    for name in ("create_event", "event", TELEMETRY_ENV):
        if not hasattr(telemetry, name):
            found.append(f"flwr.supercore.telemetry has no {name}")
    return found


def install() -> None:
    """When this process's telemetry is off, Flower's events build nothing."""
    from flwr.supercore import telemetry

    if getattr(telemetry, TELEMETRY_ENV, "1") != "0":
        return
    telemetry.create_event = _nothing  # `event` looks it up at each call


def _nothing(event_type: object, event_details: object) -> str:
    """An event with telemetry off: nothing to build, nothing to send."""
    return ""

"""`fl-superlink`: Flower's SuperLink, taking `flower-superlink`'s arguments, that accepts
SuperNode heartbeats down to 1 s apart (Flower: 10), so that fl-run's local federation
notices a killed SuperNode within seconds (see `flwr_hooks.set_node_heartbeat`)."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    from fl_system import flwr_hooks

    try:
        flwr_hooks.check()
    except flwr_hooks.FlwrInternalsChanged as err:
        print(f"fl-superlink: error: {err}", file=sys.stderr, flush=True)
        return 2
    flwr_hooks.run_superlink(list(sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())

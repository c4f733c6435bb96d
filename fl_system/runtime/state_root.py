"""Where a machine keeps its clients' saved state: one folder per run id under the state root.

The ClientApp writes there (client_app/state.py) and fl-run removes a completed run's folder
(fl_system/runtime/launch/client_state.py), so both read the root from here.
"""

from __future__ import annotations

import os
from pathlib import Path

STATE_DIR_ENV = "FL_STATE_DIR"


def default_state_root() -> Path:
    """`$FL_STATE_DIR`, else ~/.local/state/fl_system."""
    return Path(os.environ.get(STATE_DIR_ENV) or Path.home() / ".local" / "state" / "fl_system")

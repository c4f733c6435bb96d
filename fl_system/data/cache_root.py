"""Where fl_system keeps what it can derive again: parsed datasets and node partitions."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "FL_CACHE_DIR"


def default_cache_root() -> Path:
    """$FL_CACHE_DIR, else ~/.cache/fl_system."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "fl_system")

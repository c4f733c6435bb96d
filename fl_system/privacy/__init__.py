"""Differential privacy (`privacy=...`) through Flower's own wrappers and mods.

- `checks`: what composes with Flower's DP, the same sentence wherever it is caught;
- `account`: epsilon at delta by Flower's RDP accountant;
- `noise`: every noise draw from the operating system's entropy, never from the seed;
- `published`: what a DP run publishes beside its model;
- `wrappers`: Flower's wrappers check the fl_system strategy they wrap.

`install()` puts the last two hooks in place in this process; every fl_system strategy and
the ClientApp call it, so a Flower app of one's own gets them too.
"""

from __future__ import annotations

from fl_system.privacy import noise, wrappers
from fl_system.privacy.account import PrivacyAccount
from fl_system.privacy.checks import (
    FIXED,
    ON_CLIENTS,
    RULES,
    build_wrapper,
    check_composition,
    check_privacy,
    clients_per_round,
    mode,
    unaccounted_reason,
)
from fl_system.privacy.published import published_row, published_summary, withholds

__all__ = [
    "FIXED",
    "ON_CLIENTS",
    "RULES",
    "PrivacyAccount",
    "build_wrapper",
    "check_composition",
    "check_privacy",
    "clients_per_round",
    "install",
    "mode",
    "published_row",
    "published_summary",
    "unaccounted_reason",
    "withholds",
]


def install() -> None:
    """Flower's DP noise from OS entropy, and its wrappers checking what they wrap."""
    noise.install()
    wrappers.install()

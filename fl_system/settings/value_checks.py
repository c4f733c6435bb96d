"""Checks of one setting's value, each with the phrase its error message uses.

A rule is (check, expected): a value v is accepted if check(v), else refused with
"<key> must be <expected>, got <v>". fl_system.config.validation holds the run's rules, and each
add-on (fl_system/addons/<name>.py) its own, checked by both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ConfigError(ValueError):
    """The config asks for something impossible; the message names the key."""


Check = Callable[[Any], bool]
Rule = tuple[Check, str]


def integer_at_least(minimum: int) -> Check:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= minimum


def optional(check: Check) -> Check:
    return lambda v: v is None or check(v)


def positive_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v > 0


def non_negative_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and v >= 0


def above_one(v: Any) -> bool:
    return positive_number(v) and v > 1


def probability(v: Any) -> bool:
    return non_negative_number(v) and v <= 1


def refusal(key: str, rule: Rule, value: Any) -> str | None:
    """The error message for `value` under `rule`, or None if it passes."""
    check, expected = rule
    return None if check(value) else f"{key} must be {expected}, got {value!r}"

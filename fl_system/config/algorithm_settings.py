"""The range of every algorithm's own settings (`algorithm.<key>` of conf/algorithm/<name>.yaml).

`check_values` applies them, so fl-run refuses a value before any process starts and a
strategy built with plain arguments (`FedProx(mu=-1)`) refuses it at construction, with the
same message. The add-ons' settings (`algorithm.disco.*`, `algorithm.gsnr.*`) are their own
(`fl_system.addons`); a strategy's checks that need more than one value (FedCat's k against
num_clients, TACO's gamma against the local steps) stay with the strategy.
"""

from __future__ import annotations

import math
from collections.abc import Collection
from typing import Any

from fl_system.algorithms.efl import FISHER_COMM, FISHER_MODES
from fl_system.settings.value_checks import (
    Check,
    Rule,
    integer_at_least,
    non_negative_number,
    optional,
    positive_number,
    probability,
)


def _finite(check: Check) -> Check:
    return lambda v: check(v) and math.isfinite(v)


def _one_of(choices: Collection[str]) -> Rule:
    return (lambda v: v in choices, f"one of {', '.join(choices)}")


def _below_one(v: Any) -> bool:
    return non_negative_number(v) and v < 1


BOOLEAN: Rule = (lambda v: isinstance(v, bool), "true or false")
RATE: Rule = (_finite(positive_number), "a number > 0")
WEIGHT: Rule = (_finite(non_negative_number), "a number >= 0")
DECAY: Rule = (_finite(_below_one), "a number in [0, 1)")
FRACTION: Rule = (lambda v: positive_number(v) and v <= 1, "a number in (0, 1]")
COUNT: Rule = (integer_at_least(1), "an integer >= 1")
_ADAPTIVE = {"eta": RATE, "beta_1": DECAY, "beta_2": DECAY, "tau": RATE}

RULES: dict[str, dict[str, Rule]] = {
    "efl": {
        "lam": WEIGHT,
        "fisher_samples": COUNT,
        "fisher_mode": _one_of(FISHER_MODES),
        "fisher_comm": _one_of(FISHER_COMM),
        "fisher_q": FRACTION,
        "fisher_every": COUNT,
        "theta": (optional(lambda v: positive_number(v) and v >= 1), "null or a number >= 1"),
    },
    "fedacg": {"lam": DECAY, "beta": WEIGHT},
    "fedadagrad": {k: _ADAPTIVE[k] for k in ("eta", "beta_1", "tau")},
    "fedadam": _ADAPTIVE,
    "fedyogi": _ADAPTIVE,
    "fedasync": {"alpha": FRACTION, "mu": WEIGHT},
    "fedbuff": {"eta": RATE},
    "fedcat": {
        "k": (optional(integer_at_least(1)), "null (a tenth of the clients) or an integer >= 1"),
        "eps": (probability, "a number in [0, 1]"),
        "lam": COUNT,
        "concatenate": BOOLEAN,
        "count_selection": BOOLEAN,
    },
    "feddyn": {"alpha": RATE, "max_grad_norm": (optional(positive_number), "null or a number > 0")},
    "fedprox": {"mu": WEIGHT},
    "moon": {"mu": WEIGHT, "temperature": RATE},
    "stem": {"a": (probability, "a number in [0, 1]")},
    "taco": {
        "kappa": FRACTION,
        "lam": (optional(integer_at_least(1)), "null (T / 5, at least 3) or an integer >= 1"),
        "expel": BOOLEAN,
        "warmup_rounds": (integer_at_least(0), "an integer >= 0"),
        "strike_all": BOOLEAN,
        "gamma": (optional(non_negative_number), "null (1 / K) or a number >= 0"),
        "delta_scale": (optional(positive_number), "null (K) or a number > 0"),
        "tailored_correction": BOOLEAN,
        "tailored_aggregation": BOOLEAN,
    },
}

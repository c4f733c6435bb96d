"""Whether a checkpointed run and the current config are the same experiment.

Settings are compared leaf by leaf (`train.lr`, `compression.up.name`), except the top-level
keys of `RESUMABLE_CHANGES`, which do not change what is trained. A checkpoint written before
a setting existed lacks it, and a new setting must not make such a run unresumable: a setting
the saved config lacks counts as its default (conf/ with the run's own group options), so
resuming goes on when it is at that default now and is refused, naming it, when not. An add-on
switched off (`enabled: false`) changes nothing whatever its other settings say, so its
settings are not compared while it is off in the saved run and off or gone now (an add-on
whose layout changed since).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fl_system.config.experiment import RESUMABLE_CHANGES
from fl_system.records.checkpoint import CheckpointError

Tree = Mapping[str, Any]

# Modules (and classes) a compared `_target_` may name that moved when fl_system was split
# into rooms: a checkpoint written before names the same objects by their old paths.
MOVED_MODULES = {
    "fl_system.data.partitions.NonBalancePartition": (
        "fl_system.data.label_imbalance.NonBalancePartition"
    ),
    "fl_system.data.partitions.ParetoPartition": "fl_system.data.label_imbalance.ParetoPartition",
    "fl_system.augment.": "fl_system.learning.augment.",
    "fl_system.codecs.": "fl_system.learning.codecs.",
    "fl_system.models.": "fl_system.learning.models.",
    "fl_system.robust.": "fl_system.learning.robust.",
}


def check_same_experiment(saved: Tree, current: Tree, defaults: Tree) -> list[str]:
    """Raise CheckpointError naming every setting that makes `current` another experiment
    than `saved`; return the settings `saved` lacks that were taken at their `defaults`
    (a whole node when every setting under it was), in config order."""
    old, new, base = _leaves(saved), _leaves(current), _leaves(defaults)
    old = {k: _moved(v) if k.endswith("_target_") else v for k, v in old.items()}
    for prefix in _switched_off(saved, current):
        old = {k: v for k, v in old.items() if not _under(k, prefix)}
        new = {k: v for k, v in new.items() if not _under(k, prefix)}
    differing = [k for k in old if old[k] != new.get(k, _ABSENT)]
    predating = [k for k in new if k not in old]
    not_default = [k for k in predating if new[k] != base.get(k, _ABSENT)]
    problems = []
    if differing:
        problems.append(
            "the config differs from the checkpointed run in "
            + ", ".join(k if k in new else f"{k} (no longer a setting)" for k in differing)
            + f" (only {', '.join(sorted(RESUMABLE_CHANGES))} may change on resume)"
        )
    problems += [_predates(k, new[k], base.get(k, _ABSENT)) for k in not_default]
    if problems:
        raise CheckpointError("cannot resume: " + "; ".join(problems))
    return _roots(current, set(predating), "")


def _moved(target: Any) -> Any:
    """`target` under its module's current path."""
    for before, now in MOVED_MODULES.items():
        if isinstance(target, str) and target.startswith(before):
            return now + target.removeprefix(before)
    return target


def defaults_line(filled: list[str]) -> str:
    """The one line that says which settings a resumed run took at their defaults."""
    return f"the checkpoint predates {', '.join(filled)}: resuming with their defaults"


_ABSENT = object()


def _predates(key: str, now: Any, default: Any) -> str:
    said = "has no default" if default is _ABSENT else f"its default is {default!r}"
    return f"the checkpointed run predates {key}, which is {now!r} now ({said})"


def _leaves(tree: Tree, prefix: str = "") -> dict[str, Any]:
    """{dotted key: value} of every non-mapping value (and empty mapping) outside
    RESUMABLE_CHANGES."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if not prefix and key in RESUMABLE_CHANGES:
            continue
        if isinstance(value, Mapping) and value:
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _switched_off(saved: Tree, current: Tree, prefix: str = "") -> list[str]:
    """Dotted keys of the add-ons off in `saved` and off or absent in `current`."""
    found = []
    for key, node in saved.items():
        if not isinstance(node, Mapping):
            continue
        now = current.get(key) if isinstance(current, Mapping) else None
        if node.get("enabled") is False and (
            not isinstance(now, Mapping) or now.get("enabled") is False
        ):
            found.append(prefix + key)
        else:
            found += _switched_off(node, now if isinstance(now, Mapping) else {}, f"{prefix}{key}.")
    return found


def _under(key: str, prefix: str) -> bool:
    return key == prefix or key.startswith(prefix + ".")


def _roots(tree: Tree, keys: set[str], prefix: str) -> list[str]:
    """`keys` (dotted leaves of `tree`) with each node all of whose leaves are in `keys`
    named once instead of its leaves."""
    out = []
    for key, value in tree.items():
        path = prefix + key
        if isinstance(value, Mapping) and value:
            below = _roots(value, keys, path + ".")
            leaves = _leaves(value, path + ".")
            out += [path] if leaves and set(leaves) <= keys else below
        elif path in keys:
            out.append(path)
    return out

"""The command line before Hydra sees it: group names users type, and one-line errors.

A runtime's settings may also be named after the runtime: `simulation.address=auto` is
`runtime.address=auto` in a run with runtime=simulation.

`compression.up` is filled from the `codec` group (`codec@compression.up` in config.yaml's
defaults list). Hydra's own syntax to choose its option is `codec@compression.up=st`; the
name users type is `compression.up=st`, so `fl-run` rewrites such overrides before Hydra sees
them. `compression.up.q=0.05` (a value inside the chosen option) needs no rewrite.

Hydra reports an unreadable override, an unknown option or key with several lines (or a
traceback) and exit 1; `check_syntax`, `check_choices` and `check_keys` say the same in one
line naming the override and what it can be (fl-run exits 2).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep
from hydra.errors import ConfigCompositionException, HydraException
from omegaconf import OmegaConf


def _group_defaults(conf_dir: Path) -> list[tuple[str, object]]:
    """(key, value) of every `key: value` entry of config.yaml's defaults list."""
    defaults = OmegaConf.to_container(OmegaConf.load(conf_dir / "config.yaml")).get("defaults", [])
    return [(str(k), v) for entry in defaults if isinstance(entry, dict) for k, v in entry.items()]


def mounted_groups(conf_dir: Path) -> dict[str, str]:
    """{package: group} of every `group@package: option` entry of config.yaml's defaults."""
    mounts = {}
    for key, _ in _group_defaults(conf_dir):
        group, at, package = key.partition("@")
        if at and "/" not in package:
            mounts[package] = group.removeprefix("override ").strip()
    return mounts


def rewrite(overrides: Sequence[str], mounts: dict[str, str], conf_dir: Path) -> list[str]:
    """`package=option` as `group@package=option` where `package` is a mounted group's (a
    sweep too: `compression.up=none,st`); an option the group does not have raises ValueError
    naming the key and the options."""
    out = []
    parser = OverridesParser.create()
    for override in overrides:
        key, eq, value = override.partition("=")
        if eq and (runtime_key := _runtime_setting(key, overrides, conf_dir)):
            out.append(f"{runtime_key}={value}")
            continue
        if eq and _own_model_argument(key, overrides, conf_dir):
            out.append(f"+{override}")
            continue
        if not (eq and key in mounts):
            out.append(override)
            continue
        known = options(conf_dir, mounts[key])
        for choice in _named(parser.parse_override(override).value()):
            if choice not in known:
                raise ValueError(
                    f"{key}={choice}: no such option; choose one of {', '.join(known)}"
                )
        out.append(f"{mounts[key]}@{key}={value}")
    return out


def _own_model_argument(key: str, overrides: Sequence[str], conf_dir: Path) -> bool:
    """Whether `model.NAME` is a keyword argument of one's own model (model=custom), which
    conf/model/custom.yaml cannot list."""
    group, dot, setting = key.partition(".")
    if group != "model" or not dot or "model=custom" not in overrides:
        return False
    return setting.split(".")[0] not in (OmegaConf.load(conf_dir / "model" / "custom.yaml") or {})


def _runtime_setting(key: str, overrides: Sequence[str], conf_dir: Path) -> str | None:
    """`runtime.address` for `simulation.address` (a runtime's setting under the runtime's
    own name, as users call it) when the run chooses runtime=simulation; ValueError when it
    chooses another; None for any other key."""
    name, dot, setting = key.partition(".")
    if not dot or name not in options(conf_dir, "runtime"):
        return None
    chosen = next(
        (o.partition("=")[2] for o in overrides if o.partition("=")[0] == "runtime"),
        chosen_groups(conf_dir)["runtime"],
    )
    if chosen != name:
        raise ValueError(
            f"{key} is a setting of runtime={name}, and this run has runtime={chosen} "
            f"(add runtime={name})"
        )
    return f"runtime.{setting}"


def chosen_groups(conf_dir: Path) -> dict[str, str | None]:
    """{group: default option} of the groups config.yaml chooses by their own name
    (`algorithm: fedavg`; not mounted ones, not Hydra's)."""
    return {
        key: value
        for key, value in _group_defaults(conf_dir)
        if "@" not in key and " " not in key and (conf_dir / key).is_dir()
    }


def options(conf_dir: Path, group: str) -> list[str]:
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))


def check_syntax(overrides: Sequence[str]) -> None:
    """Every `key=value` reads in Hydra's override grammar; else ValueError naming it and how
    to quote a value that holds '=' or spaces (a path like `hydra.run.dir=out/lr=0.1`)."""
    parser = OverridesParser.create()
    for override in overrides:
        if override.startswith("-"):  # Hydra's own flags (--multirun, -m, --cfg job)
            continue
        try:
            parser.parse_override(override)
        except HydraException as err:
            key = override.partition("=")[0]
            raise ValueError(
                f"{override}: Hydra cannot read this override ({str(err).splitlines()[0]}); "
                f"quote a value that holds '=', spaces or brackets: \"{key}='...'\""
            ) from None


def check_choices(overrides: Sequence[str], conf_dir: Path) -> None:
    """`group=option` names options the group has, as does each of a sweep (`group=a,b`), a
    list (`tracking=[mlflow,wandb]`, for groups that take several) or a sweep of lists; else
    ValueError naming the key and the choices."""
    groups = chosen_groups(conf_dir)
    parser = OverridesParser.create()
    for override in overrides:
        key, eq, _ = override.partition("=")
        if not eq or key not in groups:
            continue
        known = options(conf_dir, key)
        for choice in _named(parser.parse_override(override).value()):
            if choice not in known:
                raise ValueError(
                    f"{key}={choice}: no such option; choose one of {', '.join(known)}"
                )


def _named(value: object) -> list[str]:
    """The option names an override's value holds (none for a glob or a range)."""
    if isinstance(value, ChoiceSweep):
        return [name for item in value.list for name in _named(item)]
    if isinstance(value, list):
        return [name for item in value for name in _named(item)]
    return [str(value)] if isinstance(value, str | int | float) else []


_NOT_IN_STRUCT = re.compile(r"Could not override '([^']+)'")


def check_keys(overrides: Sequence[str], conf_dir: Path) -> None:
    """Compose the config once; a key it does not have raises ValueError saying which group
    option has it, or which keys are close (Hydra's own message otherwise)."""
    plain = [o for o in overrides if not o.startswith(("hydra.", "hydra/", "-"))]
    try:
        with initialize_config_dir(config_dir=str(conf_dir), version_base=None):
            compose("config", overrides=plain)
    except ConfigCompositionException as err:
        found = _NOT_IN_STRUCT.search(str(err))
        if found is None:
            raise ValueError(str(err).splitlines()[0]) from None
        raise ValueError(_unknown_key(found.group(1), plain, conf_dir)) from None


def _unknown_key(key: str, overrides: Sequence[str], conf_dir: Path) -> str:
    group, _, setting = key.partition(".")
    groups = chosen_groups(conf_dir)
    if group in groups and setting:
        chosen = (
            next((o.partition("=")[2] for o in overrides if o.partition("=")[0] == group), None)
            or groups[group]
        )
        first = setting.split(".")[0]
        having = [
            name
            for name in options(conf_dir, group)
            if first in (OmegaConf.load(conf_dir / group / f"{name}.yaml") or {})
        ]
        verb = "has" if len(having) == 1 else "have"
        named = [f"{group}={h}" for h in having]
        listed = " and ".join([", ".join(named[:-1]), named[-1]] if len(named) > 2 else named)
        where = f"; {listed} {verb} it" if having else ""
        return f"{key}: {group}={chosen} has no setting '{first}'{where}"
    cfg = OmegaConf.load(conf_dir / "config.yaml")
    near = difflib.get_close_matches(key.split(".")[0], [str(k) for k in cfg], n=3)
    hint = f"; did you mean {', '.join(near)}?" if near else ""
    return f"{key}: no such setting{hint} (+{key}=... adds a new one)"

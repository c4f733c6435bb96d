"""Command-line names for config groups mounted at a package of their own.

`compression.up` is filled from the `codec` group (`codec@compression.up` in config.yaml's
defaults list). Hydra's own syntax to choose its option is `codec@compression.up=st`; the
name users type is `compression.up=st`, so `fl-run` rewrites such overrides before Hydra sees
them. `compression.up.q=0.05` (a value inside the chosen option) needs no rewrite.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from omegaconf import OmegaConf


def mounted_groups(conf_dir: Path) -> dict[str, str]:
    """{package: group} of every `group@package: option` entry of config.yaml's defaults."""
    defaults = OmegaConf.to_container(OmegaConf.load(conf_dir / "config.yaml")).get("defaults", [])
    mounts = {}
    for entry in defaults:
        if isinstance(entry, dict):
            for key in entry:
                group, at, package = str(key).partition("@")
                if at and "/" not in package:
                    mounts[package] = group.removeprefix("override ").strip()
    return mounts


def rewrite(overrides: Sequence[str], mounts: dict[str, str], conf_dir: Path) -> list[str]:
    """`package=option` as `group@package=option` where `package` is a mounted group's; an
    option the group does not have raises ValueError naming the key and the options."""
    out = []
    for override in overrides:
        key, eq, value = override.partition("=")
        if not (eq and key in mounts):
            out.append(override)
            continue
        options = sorted(p.stem for p in (conf_dir / mounts[key]).glob("*.yaml"))
        if value not in options:
            raise ValueError(f"{key}={value}: no such option; choose one of {', '.join(options)}")
        out.append(f"{mounts[key]}@{key}={value}")
    return out

"""What a site's SuperNode accepts: apps signed by the operators it trusts (FL_NODE_TRUST,
set by `fl-client --trust KEY.pub`) and runs its policy allows (`site_policy`, `fl-client
--policy`), checked before any of a run's code is on the node, each decision a line of the
node's log with the app's hash and signer (`fl_system.flower.app_checks` answers a refused
run's message with the reason)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from fl_system.access.app_signature import AppRefused, TrustedKey, check
from fl_system.access.operators import RegistryError, key_id, parse_public_key
from fl_system.runtime.supernode.site_env import TRUST_ENV


def trusted_keys(paths: Sequence[Path]) -> dict[str, TrustedKey]:
    """The operator keys in `paths`, by fingerprint; ValueError naming a file that is none."""
    keys = {}
    for path in paths:
        try:
            key = parse_public_key(path.read_text(), str(path))
        except OSError as err:
            raise ValueError(f"--trust: cannot read {path} ({err.strerror})") from None
        except RegistryError as err:
            raise ValueError(f"--trust: {err}") from None
        keys[key_id(key)] = TrustedKey(path.name, key)
    return keys


def trust_line(trusted: dict[str, TrustedKey]) -> str:
    """What a node started with these keys tells its operator."""
    if not trusted:
        return "WARNING: no --trust: this node runs every app the SuperLink's operators submit"
    return f"runs only apps signed by {', '.join(k.name for k in trusted.values())}"


def from_env() -> dict[str, TrustedKey] | None:
    """The keys FL_NODE_TRUST names (None: unset, every app is taken)."""
    value = os.environ.get(TRUST_ENV)
    if not value:
        return None
    return trusted_keys([Path(p) for p in value.split(os.pathsep) if p])


def app_check(
    trusted: dict[str, TrustedKey] | None,
    policy: Callable[[Any], str | None] | None,
    say: Callable[[str], None],
) -> Callable[[Any, Any], str | None]:
    """`check(run, fab)` for `app_checks.install`: the app's signature against `trusted`
    (None: any app), then the run against the site's `policy` (None: any run). None takes the
    run, a reason refuses it."""

    def decide(run: Any, fab: Any) -> str | None:
        app = f"app sha256 {fab.hash_str[:16]}"
        if trusted is not None:
            try:
                app += f", signed by {check(fab.content, trusted).name}"
            except AppRefused as err:
                say(f"refused run {run.run_id} ({app}): {err}")
                return str(err)
        if policy is not None and (reason := policy(run)) is not None:
            say(f"refused run {run.run_id} ({app}): {reason}")
            return reason
        say(f"accepted run {run.run_id} ({app})")
        return None

    return decide

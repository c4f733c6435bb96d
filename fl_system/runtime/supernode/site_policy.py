"""What a site takes part in (`fl-client --policy policy.yaml`): its algorithms, secure
aggregation, a privacy guarantee, a number of rounds, model code shipped with a run.

The node decides from the run's own experiment config (the run config fl-run submits),
before any of the run's code is on it; a run that asks for more is refused with the site's
reason, e.g. "site_b: requires secagg=secaggplus (this run has secagg=none)". A key the file
leaves out restricts nothing. The privacy bound is the experiment's own account over all its
rounds (`fl_system.privacy.planned`); nothing of the run's config is built or called here,
only fl_system's strategy classes the config names are looked up, for how they weigh clients.
"""

from __future__ import annotations

import importlib
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, OmegaConf

from fl_system.addons import mounted
from fl_system.messages import protocol
from fl_system.privacy.planned import PlannedAccount, planned_account
from fl_system.runtime.supernode.site_env import POLICY_ENV, SITE_ENV
from fl_system.settings.config_nodes import config_from_json

DEFAULT_DELTA = 1.0e-5  # privacy.max_delta when a policy bounds epsilon and says no delta
KEYS = ("site", "algorithms", "secagg", "privacy", "max_rounds", "model_source")
PRIVACY_KEYS = ("max_epsilon", "max_delta")
STRATEGIES = "server_app."  # the only classes looked up: fl_system's own, installed here


@dataclass(frozen=True)
class SitePolicy:
    """What a site accepts (Parameters: `site` names it in refusals; `algorithms` the
    algorithm names it runs, None any; `secagg` the secure aggregation it requires, None
    none; `max_epsilon` and `max_delta` the DP account a run may reach, None: no DP needed;
    `max_rounds` None: any; `model_source` whether a run may ship model code)."""

    site: str
    algorithms: tuple[str, ...] | None = None
    secagg: str | None = None
    max_epsilon: float | None = None
    max_delta: float = DEFAULT_DELTA
    max_rounds: int | None = None
    model_source: bool = True

    def summary(self) -> str:
        """One line of what this site accepts, for the node's start-up."""
        parts = []
        if self.algorithms is not None:
            parts.append(f"algorithms {', '.join(self.algorithms)}")
        if self.secagg is not None:
            parts.append(f"secagg={self.secagg} required")
        if self.max_epsilon is not None:
            parts.append(f"DP with epsilon <= {self.max_epsilon:g} at delta <= {self.max_delta:g}")
        if self.max_rounds is not None:
            parts.append(f"at most {self.max_rounds} rounds")
        if not self.model_source:
            parts.append("no model code shipped with a run")
        return f"site {self.site} accepts " + ("; ".join(parts) if parts else "every run")

    def refusal(self, cfg: DictConfig) -> str | None:
        """Why this site does not take `cfg`'s run, its name first; None: it does."""
        why = self._why_not(cfg)
        return None if why is None else f"{self.site}: {why}"

    def _why_not(self, cfg: DictConfig) -> str | None:
        algorithm = str(OmegaConf.select(cfg, "algorithm.name", default=""))
        if self.algorithms is not None and algorithm not in self.algorithms:
            return (
                f"accepts algorithm {', '.join(self.algorithms)} "
                f"(this run has algorithm={algorithm or 'none'})"
            )
        secagg = str(OmegaConf.select(cfg, "secagg.name", default="none"))
        if self.secagg is not None and secagg != self.secagg:
            return f"requires secagg={self.secagg} (this run has secagg={secagg})"
        rounds = OmegaConf.select(cfg, "num_rounds", default=None)
        if self.max_rounds is not None and (rounds is None or int(rounds) > self.max_rounds):
            return f"accepts at most {self.max_rounds} rounds (this run has num_rounds={rounds})"
        source = OmegaConf.select(cfg, "model.source", default=None)
        if not self.model_source and source:
            return f"runs no model code shipped with a run (this run has model.source={source})"
        if self.max_epsilon is not None:
            return self._privacy_refusal(cfg)
        return None

    def _privacy_refusal(self, cfg: DictConfig) -> str | None:
        wanted = f"epsilon <= {self.max_epsilon:g} at delta <= {self.max_delta:g}"
        try:
            account = planned_account(cfg, weighting(cfg))
        except (LookupError, TypeError, ValueError) as err:
            return f"requires DP with {wanted}, and cannot account this run: {err}"
        if not isinstance(account, PlannedAccount):
            return f"requires DP with {wanted} over the run (this run: {account})"
        assert self.max_epsilon is not None
        if account.epsilon > self.max_epsilon or account.delta > self.max_delta:
            return (
                f"accepts at most {wanted} over the run (this run's account: epsilon="
                f"{account.epsilon:.4g} at delta={account.delta:.3g}, {account.how})"
            )
        return None


def weighting(cfg: DictConfig) -> str | None:
    """How the run's strategy weighs clients if not uniformly (its add-ons first), read from
    fl_system's own classes the config names; LookupError for any other."""
    targets = [str(OmegaConf.select(cfg, "algorithm.strategy._target_", default=""))]
    targets[:0] = [str(node.server._target_) for _, node in mounted(cfg.algorithm) if node.enabled]
    for target in targets:
        module, _, name = target.rpartition(".")
        if not target.startswith(STRATEGIES) or not module:
            raise LookupError(f"its strategy part {target or '(none)'} is not fl_system's")
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            raise LookupError(f"this site's fl_system has no {target}") from None
        if (how := getattr(found, "weighting", None)) is not None:
            return str(how)
    return None


def load(path: Path, site: str) -> SitePolicy:
    """The policy in the YAML file at `path` (its `site` key names it, else `site`);
    ValueError, one line naming the file and the key, for anything else."""
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except OSError as err:
        raise ValueError(f"--policy: cannot read {path} ({err.strerror})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or type(err).__name__
        raise ValueError(f"--policy: {path} is not YAML ({where}{problem})") from None
    if not isinstance(raw, dict):
        raise ValueError(f"--policy: {path} must hold a mapping of {', '.join(KEYS)}")
    bad = _check(raw, path)
    if bad is not None:
        raise ValueError(f"--policy {path}: {bad}")
    privacy = raw.get("privacy") or {}
    algorithms = raw.get("algorithms")
    return SitePolicy(
        site=str(raw.get("site") or site),
        algorithms=None if algorithms is None else tuple(str(a) for a in algorithms),
        secagg=raw.get("secagg"),
        max_epsilon=privacy.get("max_epsilon"),
        max_delta=float(privacy.get("max_delta", DEFAULT_DELTA)),
        max_rounds=raw.get("max_rounds"),
        model_source=bool(raw.get("model_source", True)),
    )


def _check(raw: dict[str, Any], path: Path) -> str | None:
    """What is wrong with the policy's keys and values (None: nothing)."""
    for key in raw:
        if key not in KEYS:
            return f"unknown key {key!r} (a policy has {', '.join(KEYS)})"
    algorithms = raw.get("algorithms")
    if algorithms is not None and (
        not isinstance(algorithms, list) or not all(isinstance(a, str) for a in algorithms)
    ):
        return "algorithms must be a list of algorithm names"
    if raw.get("secagg") not in (None, "secaggplus"):
        return f"secagg must be secaggplus, got {raw['secagg']!r}"
    rounds = raw.get("max_rounds")
    if rounds is not None and not (_positive(rounds) and isinstance(rounds, int)):
        return f"max_rounds must be a positive integer, got {rounds!r}"
    if not isinstance(raw.get("model_source", True), bool):
        return f"model_source must be true or false, got {raw['model_source']!r}"
    privacy = raw.get("privacy")
    if privacy is None:
        return None
    if not isinstance(privacy, dict) or not privacy:
        return f"privacy must be a mapping of {', '.join(PRIVACY_KEYS)}"
    for key, value in privacy.items():
        if key not in PRIVACY_KEYS:
            return f"unknown key privacy.{key} (it has {', '.join(PRIVACY_KEYS)})"
        if not _positive(value) or (key == "max_delta" and value >= 1):
            return f"privacy.{key} must be a positive number{' below 1' * (key == 'max_delta')}"
    if "max_epsilon" not in privacy:
        return "privacy needs max_epsilon (the largest epsilon over a run this site accepts)"
    return None


def _positive(value: Any) -> bool:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    return number and math.isfinite(value) and value > 0


def run_config(run: Any) -> DictConfig | str:
    """The experiment config `run` (Flower's Run) was submitted with, or why it has none."""
    text = (getattr(run, "override_config", None) or {}).get(protocol.RUN_CONFIG)
    if not text:
        return "the run carries no fl_system experiment config, so this site cannot check it"
    try:
        return config_from_json(str(text))
    except ValueError:
        return "the run's experiment config is not valid JSON, so this site cannot check it"


def from_env() -> SitePolicy | None:
    """The policy FL_NODE_POLICY names (None: unset, no policy)."""
    path = os.environ.get(POLICY_ENV)
    if not path:
        return None
    return load(Path(path), os.environ.get(SITE_ENV) or "this site")


def policy_check(policy: SitePolicy) -> Callable[[Any], str | None]:
    """`check(run)`: None takes the run, the site's reason refuses it."""

    def decide(run: Any) -> str | None:
        cfg = run_config(run)
        if isinstance(cfg, str):
            return f"{policy.site}: {cfg}"
        return policy.refusal(cfg)

    return decide

"""What a strategy checks of the experiment it is built with."""

from __future__ import annotations

import functools

from omegaconf import DictConfig, OmegaConf

from fl_system.compose import CONF_DIR


@functools.lru_cache(maxsize=1)
def _client_rules() -> dict[str, frozenset[str]]:
    """Strategy class -> the client rules its algorithms (conf/algorithm/) pair it with."""
    rules: dict[str, set[str]] = {}
    for path in sorted((CONF_DIR / "algorithm").glob("*.yaml")):
        algorithm = OmegaConf.load(path)
        strategy = OmegaConf.select(algorithm, "strategy._target_")
        rule = OmegaConf.select(algorithm, "local_rule._target_")
        if strategy and rule:
            rules.setdefault(str(strategy), set()).add(str(rule))
    return {k: frozenset(v) for k, v in rules.items()}


def check_algorithm(kind: type, cfg: DictConfig) -> None:
    """A strategy given an experiment whose clients run another rule than its own algorithm's
    (FedDyn's server rule over FedAvg's clients) is refused; a subclass of ours counts as the
    class it extends, and a strategy of one's own is not checked."""
    ours = next(
        (c for c in kind.__mro__ if c.__module__.startswith("server_app.strategies.")), kind
    )
    paired = _client_rules().get(f"{ours.__module__}.{ours.__qualname__}")
    rule = str(OmegaConf.select(cfg, "algorithm.local_rule._target_") or "")
    if paired is None or not rule or rule in paired:
        return
    raise ValueError(
        f"{kind.__name__} was given the experiment of algorithm={cfg.algorithm.name}, whose "
        f"clients run {rule.rsplit('.', 1)[-1]}; {ours.__name__}'s clients run "
        f"{', '.join(sorted(r.rsplit('.', 1)[-1] for r in paired))}: compose the experiment "
        f"with {ours.__name__}'s algorithm"
    )

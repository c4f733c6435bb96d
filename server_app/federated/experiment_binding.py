"""The experiment a strategy runs: composed from its plain arguments, or given, and checked.

Every fl_system strategy runs an experiment, the config its clients learn at the handshake.
Built as Flower's strategies are, `Scaffold(num_clients=4, train={"lr": 0.05})` composes it
from its arguments, over `algorithm=scaffold dataset=app model=app` (the nodes' ClientApp,
`client_app.make_client_app`, loads the data and builds the model). `experiment=` takes a
list of overrides, to which the arguments are added, or a composed experiment
(`fl_system.config.compose.compose_experiment`), which an argument may repeat but not contradict.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from omegaconf import DictConfig, OmegaConf

from fl_system.config.compose import CONF_DIR, compose_experiment
from fl_system.config.experiment import Experiment, as_experiment

if TYPE_CHECKING:
    from server_app.addons import ServerAddon


class Common(TypedDict, total=False):
    """The arguments every strategy takes (see `FederatedStrategy`)."""

    num_clients: int
    fraction_train: float
    num_classes: int
    train: Mapping[str, Any]
    seed: int
    options: Sequence[str]
    experiment: Experiment
    addons: Sequence[ServerAddon]


@functools.lru_cache(maxsize=1)
def _algorithms() -> dict[str, tuple[str, frozenset[str]]]:
    """Strategy class path -> (its algorithm's name, the client rules conf/algorithm/ pairs
    it with)."""
    found: dict[str, tuple[str, set[str]]] = {}
    for path in sorted((CONF_DIR / "algorithm").glob("*.yaml")):
        algorithm = OmegaConf.load(path)
        strategy = OmegaConf.select(algorithm, "strategy._target_")
        rule = OmegaConf.select(algorithm, "local_rule._target_")
        if strategy and rule:
            found.setdefault(str(strategy), (path.stem, set()))[1].add(str(rule))
    return {k: (name, frozenset(rules)) for k, (name, rules) in found.items()}


def _ours(kind: type) -> tuple[type, tuple[str, frozenset[str]] | None]:
    """The fl_system strategy `kind` is or extends, and its algorithm (None: none of ours)."""
    for c in kind.__mro__:
        known = _algorithms().get(f"{c.__module__}.{c.__qualname__}")
        if known is not None:
            return c, known
    return kind, None


def check_algorithm(kind: type, cfg: DictConfig) -> None:
    """A strategy given an experiment whose clients run another rule than its own algorithm's
    (FedDyn's server rule over FedAvg's clients) is refused; a subclass of ours counts as the
    class it extends, and a strategy of one's own is not checked."""
    ours, known = _ours(kind)
    rule = str(OmegaConf.select(cfg, "algorithm.local_rule._target_") or "")
    if known is None or not rule or rule in known[1]:
        return
    raise ValueError(
        f"{kind.__name__} was given the experiment of algorithm={cfg.algorithm.name}, whose "
        f"clients run {rule.rsplit('.', 1)[-1]}; {ours.__name__}'s clients run "
        f"{', '.join(sorted(r.rsplit('.', 1)[-1] for r in known[1]))}: compose the experiment "
        f"with {ours.__name__}'s algorithm"
    )


def check_arguments(kind: type, common: Mapping[str, Any]) -> None:
    """Refuse a keyword that is none of `kind`'s arguments, naming the closest one: Python
    hands any keyword to `**common`, where a misspelt one was silently ignored
    (`FedProx(muu=0.5)` ran with mu 0.01)."""
    unknown = sorted(set(common) - set(Common.__annotations__))
    if not unknown:
        return
    known = sorted(set(Common.__annotations__) | _own_arguments(kind))
    close = difflib.get_close_matches(unknown[0], known, n=1)
    hint = f"did you mean {close[0]!r}?" if close else f"it takes {', '.join(known)}"
    raise TypeError(f"{kind.__name__}() got an unexpected keyword argument {unknown[0]!r}; {hint}")


def _own_arguments(kind: type) -> set[str]:
    """The keyword arguments `kind`'s constructors name, up its class hierarchy."""
    names: set[str] = set()
    for c in kind.__mro__:
        if "__init__" in vars(c):
            parameters = inspect.signature(vars(c)["__init__"]).parameters.values()
            names |= {p.name for p in parameters if p.kind is p.KEYWORD_ONLY}
    return names - {"settings"}


def bind_experiment(kind: type, common: Common, settings: Mapping[str, Any]) -> DictConfig:
    """The experiment a `kind` strategy runs, from `common` (the arguments every strategy
    takes) and `settings` (config key -> its own arguments' values; None: the default)."""
    given = {**_common_settings(common), **{k: v for k, v in settings.items() if v is not None}}
    experiment = common.get("experiment")
    options = [str(o) for o in common.get("options", ())]
    fraction = common.get("fraction_train")
    if experiment is None or _is_overrides(experiment):
        base = [str(o) for o in experiment or ()]
        if experiment is None:
            base = ["dataset=app", "model=app", *base]
        if not any(o.lstrip("+~").startswith("algorithm=") for o in [*base, *options]):
            base = [f"algorithm={_algorithm_name(kind)}", *base]
        overrides = [*base, *options, *(f"{k}={hydra_value(k, v)}" for k, v in given.items())]
        cfg = compose_experiment(overrides)
        if fraction is not None:
            per_round = clients_per_round(fraction, int(cfg.num_clients))
            if per_round != cfg.clients_per_round:
                cfg = compose_experiment([*overrides, f"clients_per_round={per_round}"])
    else:
        if options:
            raise ValueError(
                f"{kind.__name__}: options= adds overrides to a list of them; this experiment "
                "is composed: give its settings when composing it"
            )
        cfg = as_experiment(experiment)
        check_algorithm(kind, cfg)  # before its settings: another algorithm has others
        if fraction is not None:
            given["clients_per_round"] = clients_per_round(fraction, int(cfg.num_clients))
        for key, value in given.items():
            _agree(kind, cfg, key, value)
    check_algorithm(kind, cfg)
    return cfg


def clients_per_round(fraction: object, num_clients: int) -> int | None:
    """Flower's `fraction_train` as the clients a round samples (None: all of them)."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float) or not 0 < fraction <= 1:
        raise ValueError(f"fraction_train must be a number in (0, 1], got {fraction!r}")
    count = max(1, math.floor(fraction * num_clients))
    return None if count >= num_clients else count


def hydra_value(key: str, value: Any) -> str:
    """`value` as a Hydra override writes it (strings quoted, so 'null' stays a string)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(hydra_value(key, v) for v in value) + "]"
    raise ValueError(f"{key} must be a number, string, true/false or list, got {value!r}")


def _common_settings(common: Common) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "num_clients": common.get("num_clients"),
        "dataset.num_classes": common.get("num_classes"),
        "seed": common.get("seed"),
    }
    train = common.get("train") or {}
    if not isinstance(train, Mapping):
        raise ValueError(f"train must be a mapping of train.* settings, got {train!r}")
    settings.update({f"train.{k}": v for k, v in train.items()})
    return {k: v for k, v in settings.items() if v is not None}


def _is_overrides(experiment: Experiment) -> bool:
    return isinstance(experiment, Sequence) and not isinstance(experiment, str)


def _algorithm_name(kind: type) -> str:
    _, known = _ours(kind)
    if known is None:
        raise ValueError(
            f"{kind.__name__} is no algorithm of conf/algorithm/: build it with "
            "experiment=[...] naming the algorithm its clients run"
        )
    return known[0]


def _agree(kind: type, cfg: DictConfig, key: str, value: Any) -> None:
    current = OmegaConf.select(cfg, key)
    same = current == value and isinstance(current, bool) == isinstance(value, bool)
    if not same:
        name = key.split(".")[-1]
        raise ValueError(
            f"{kind.__name__}({name}={value!r}) disagrees with its experiment's "
            f"{key}={current!r}: give it once"
        )

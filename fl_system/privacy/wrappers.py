"""Flower's DP wrappers around fl_system's strategies: fl-run's refusals wherever they wrap.

In a Flower app of one's own, `DifferentialPrivacyServerSideFixedClipping(strategy, ...)` is
Flower's class, built by the user. `install()` makes the four Message-API wrappers check the
strategy they wrap as they are built, before any round: a rule that cannot run under the
wrapper's mechanism is refused with fl-run's sentence, and so is a wrapper that does not
match the strategy's experiment (another privacy mode, or other settings than its
`privacy.*`: the clients apply the experiment's mod and the strategy averages as its privacy
says). The wrapped strategy is marked with the wrapper's mode, so a strategy whose experiment
asks for a server-side mechanism refuses to train without it (`required_wrapper`), and to
start its rounds itself (`refuse_own_start`): the wrapper's `start` runs them.
Strategies that are not fl_system's pass unchecked.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fl_system.flower import raise_if
from fl_system.privacy.checks import check_composition, check_rule, clients_per_round, mode
from fl_system.settings.value_checks import ConfigError

BASES = (
    ("flwr.serverapp.strategy.dp_fixed_clipping", "DifferentialPrivacyFixedClippingBase"),
    ("flwr.serverapp.strategy.dp_adaptive_clipping", "DifferentialPrivacyAdaptiveBase"),
)
MODES = {
    "DifferentialPrivacyServerSideFixedClipping": "central_fixed",
    "DifferentialPrivacyClientSideFixedClipping": "client_fixed",
    "DifferentialPrivacyServerSideAdaptiveClipping": "central_adaptive",
    "DifferentialPrivacyClientSideAdaptiveClipping": "client_adaptive",
}
# the wrapper's argument -> the experiment's privacy setting it must equal
SETTINGS = (
    "noise_multiplier",
    "clipping_norm",
    "initial_clipping_norm",
    "target_clipped_quantile",
    "clip_norm_lr",
    "clipped_count_stddev",
)
WRAPPED_BY = "dp_wrapper_mode"  # set on a checked strategy: the mode of its wrapper
_CHECKED = "_fl_system_checks_wrapping"


def problems() -> list[str]:
    """What moved in the installed flwr that `install()` hooks into."""
    found = []
    for module, name in BASES:
        base = getattr(importlib.import_module(module), name, None)
        if base is None or "strategy" not in inspect.signature(base.__init__).parameters:
            found.append(f"{module}.{name} no longer takes the strategy it wraps")
    return found


def install() -> None:
    """Make Flower's DP wrappers check what they wrap (idempotent). Raises
    FlwrInternalsChanged if flwr moved them."""
    raise_if(problems())
    for module, name in BASES:
        base = getattr(importlib.import_module(module), name)
        if not getattr(base.__init__, _CHECKED, False):
            base.__init__ = _checked(base.__init__)


def _checked(init: Any) -> Any:
    signature = inspect.signature(init)

    @functools.wraps(init)
    def checked_init(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        init(self, *args, **kwargs)
        flowers = next((c.__name__ for c in type(self).__mro__ if c.__name__ in MODES), "")
        check_wrapping(flowers, bound.arguments)

    setattr(checked_init, _CHECKED, True)
    return checked_init


def check_wrapping(wrapper: str, arguments: Mapping[str, Any]) -> None:
    """Raise ConfigError if Flower's `wrapper` (the class's name, or that of the Flower
    wrapper it subclasses), built with `arguments`, cannot wrap its strategy; mark the
    strategy with the wrapper's mode if it can."""
    strategy = arguments["strategy"]
    name = MODES.get(wrapper)
    if name is None or not hasattr(strategy, "privacy_conflict"):
        return  # a wrapper of Flower's we do not map, or a strategy that is not ours
    cfg: DictConfig | None = strategy.experiment
    if cfg is None:
        check_rule(strategy, name)
    else:
        check_composition(cfg, strategy, name)
        _check_match(wrapper, name, arguments, cfg)
    setattr(strategy, WRAPPED_BY, name)


def _check_match(wrapper: str, name: str, arguments: Mapping[str, Any], cfg: DictConfig) -> None:
    """The wrapper runs the experiment's privacy, with the experiment's settings."""
    composed = mode(cfg)
    if composed != name:
        raise ConfigError(
            f"Flower's {wrapper} wraps a strategy whose experiment has privacy={composed}: "
            f"compose it with privacy={name} (what this wrapper runs), so that its clients and "
            "its average are the ones the noise is calibrated to"
        )
    sampled = clients_per_round(cfg)
    if arguments["num_sampled_clients"] != sampled:
        raise ConfigError(
            f"Flower's {wrapper} was given num_sampled_clients="
            f"{arguments['num_sampled_clients']!r} but the experiment samples {sampled} clients "
            "a round (clients_per_round, else num_clients): the noise is calibrated to that"
        )
    for key in SETTINGS:
        if key in arguments and key in cfg.privacy and arguments[key] != cfg.privacy[key]:
            raise ConfigError(
                f"Flower's {wrapper} was given {key}={arguments[key]!r} but the experiment has "
                f"privacy.{key}={cfg.privacy[key]!r}: give both the same value (the account "
                "and the clients' clipping follow the experiment)"
            )


def required_wrapper(cfg: DictConfig | None, strategy: Any) -> None:
    """Raise ConfigError if the experiment asks for a server-side DP mechanism and no
    matching Flower wrapper was built around `strategy`: it would train without noise."""
    if cfg is None or OmegaConf.select(cfg, "privacy.server") is None:
        return
    name = mode(cfg)
    if getattr(strategy, WRAPPED_BY, None) != name:
        raise ConfigError(
            f"the experiment has privacy={name} but its strategy runs without Flower's "
            f"{_wrapper_of(name)} around it: no noise would be added; wrap it "
            f"(fl_system.privacy.build_wrapper(experiment, strategy) builds the matching one)"
        )


def refuse_own_start(cfg: DictConfig | None, strategy: Any) -> None:
    """Raise ConfigError if the experiment asks for a server-side DP mechanism: the rounds
    must be its Flower wrapper's `start`, as the strategy's own would add no noise."""
    if cfg is None or OmegaConf.select(cfg, "privacy.server") is None:
        return
    required_wrapper(cfg, strategy)
    raise ConfigError(
        f"the experiment has privacy={mode(cfg)}: call start on Flower's "
        f"{_wrapper_of(mode(cfg))} around the strategy, not on the strategy inside it, whose "
        "own start would add no noise"
    )


def _wrapper_of(name: str) -> str:
    """The name of Flower's wrapper that runs privacy mode `name`."""
    return next(k for k, v in MODES.items() if v == name)

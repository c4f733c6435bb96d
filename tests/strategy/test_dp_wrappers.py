"""Flower's own DP wrappers around fl_system's strategies, as a Flower app of one's own builds
them: fl-run's refusals, and a wrapper that does not match the strategy's experiment, fail as
the wrapper is built; a strategy whose experiment asks for a wrapper refuses to train without."""

from __future__ import annotations

import pytest
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp.strategy import (
    DifferentialPrivacyClientSideAdaptiveClipping,
    DifferentialPrivacyClientSideFixedClipping,
    DifferentialPrivacyServerSideFixedClipping,
    FedAvg,
)

from fl_system.config.compose import compose_experiment
from fl_system.config.experiment import build_strategy
from fl_system.config.preflight import check_parts
from fl_system.privacy import build_wrapper
from fl_system.settings.value_checks import ConfigError
from server_app.strategies import FedAvg as OurFedAvg

REFUSED = {  # fl-run refuses each of these with privacy=central_fixed
    "feddyn": [],
    "scaffold": [],
    "fedcat": [],
    "fedacg": [],
    "efl": [],
    "taco": ["train.local_steps=5"],
}


def _fl_run_sentence(overrides: list[str]) -> str:
    """What fl-run's check of the parts says (fl-run prints it after 'fl-run: error: ')."""
    with pytest.raises(ConfigError) as refused:
        check_parts(compose_experiment(overrides))
    return str(refused.value)


@pytest.mark.parametrize("algorithm", sorted(REFUSED))
def test_wrapping_a_rule_dp_cannot_run_fails_with_fl_runs_sentence(algorithm: str) -> None:
    extra = [f"algorithm={algorithm}", *REFUSED[algorithm]]
    strategy = build_strategy(compose_experiment(extra))
    with pytest.raises(ConfigError) as refused:
        DifferentialPrivacyServerSideFixedClipping(
            strategy, noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=4
        )
    said = str(refused.value)
    assert said == _fl_run_sentence([*extra, "privacy=central_fixed"])
    assert said.startswith(f"privacy=central_fixed does not compose with algorithm={algorithm}: ")


@pytest.mark.parametrize(
    ("experiment", "wrapper", "settings", "said"),
    [
        (
            [],
            DifferentialPrivacyServerSideFixedClipping,
            {"noise_multiplier": 1.0, "clipping_norm": 1.0, "num_sampled_clients": 4},
            "wraps a strategy whose experiment has privacy=none: compose it with "
            "privacy=central_fixed",
        ),
        (
            ["privacy=central_fixed"],
            DifferentialPrivacyClientSideFixedClipping,
            {"noise_multiplier": 1.0, "clipping_norm": 1.0, "num_sampled_clients": 4},
            "experiment has privacy=central_fixed: compose it with privacy=client_fixed",
        ),
        (
            ["privacy=central_fixed"],
            DifferentialPrivacyServerSideFixedClipping,
            {"noise_multiplier": 2.0, "clipping_norm": 1.0, "num_sampled_clients": 4},
            "was given noise_multiplier=2.0 but the experiment has privacy.noise_multiplier=1.0",
        ),
        (
            ["privacy=central_fixed", "clients_per_round=3"],
            DifferentialPrivacyServerSideFixedClipping,
            {"noise_multiplier": 1.0, "clipping_norm": 1.0, "num_sampled_clients": 4},
            "was given num_sampled_clients=4 but the experiment samples 3 clients a round",
        ),
        (
            ["privacy=client_adaptive"],
            DifferentialPrivacyClientSideAdaptiveClipping,
            {"noise_multiplier": 1.0, "num_sampled_clients": 4, "clipped_count_stddev": 2.0},
            "clipped_count_stddev=2.0 but the experiment has privacy.clipped_count_stddev=1.0",
        ),
    ],
)
def test_a_wrapper_that_does_not_match_the_experiment_is_refused(
    experiment: list[str], wrapper: type, settings: dict, said: str
) -> None:
    strategy = build_strategy(compose_experiment(experiment))
    with pytest.raises(ConfigError) as refused:
        wrapper(strategy, **settings)
    assert said in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm=feddyn", "privacy=central_fixed"],
        ["privacy=client_fixed", "compression.up=topk"],
        ["algorithm=foolsgold", "privacy=central_adaptive"],
    ],
)
def test_a_strategy_built_with_an_experiment_dp_cannot_run_is_refused(overrides) -> None:
    """Built in an app of one's own, before any wrapper: fl-run's sentence."""
    with pytest.raises(ConfigError) as refused:
        build_strategy(compose_experiment(overrides))
    assert str(refused.value) == _fl_run_sentence(overrides)


def test_the_matching_wrapper_passes_and_without_it_the_strategy_refuses_to_train() -> None:
    experiment = compose_experiment(["privacy=central_fixed", "num_clients=4"])
    unwrapped = build_strategy(experiment)
    with pytest.raises(ConfigError, match="runs without Flower's DifferentialPrivacyServerSide"):
        unwrapped.configure_train(1, ArrayRecord(), ConfigRecord(), grid=None)  # type: ignore[arg-type]
    wrapped = build_strategy(compose_experiment(["privacy=central_fixed", "num_clients=4"]))
    wrapper = build_wrapper(experiment, wrapped)
    assert isinstance(wrapper, DifferentialPrivacyServerSideFixedClipping)
    assert wrapped.dp_wrapper_mode == "central_fixed"


def test_flowers_own_strategies_are_wrapped_as_before() -> None:
    wrapper = DifferentialPrivacyServerSideFixedClipping(
        FedAvg(), noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=4
    )
    assert wrapper.noise_multiplier == 1.0


def test_a_subclass_of_flowers_wrapper_is_checked_as_the_wrapper() -> None:
    class MyPrivacy(DifferentialPrivacyServerSideFixedClipping):
        pass

    strategy = build_strategy(compose_experiment(["algorithm=scaffold"]))
    with pytest.raises(ConfigError, match=r"^privacy=central_fixed does not compose with alg"):
        MyPrivacy(strategy, noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=4)


PLAIN = ["privacy=central_fixed", "privacy.noise_multiplier=0.1", "privacy.clipping_norm=1.0"]


def _never_evaluated(server_round: int, arrays: ArrayRecord) -> None:
    raise AssertionError("the run started")


def test_a_plain_argument_strategy_under_central_dp_starts_only_inside_its_wrapper() -> None:
    """The README's DP app's FedAvg: unwrapped, or started itself inside the wrapper, it
    refuses to start (before the initial evaluation) in one line; a wrapper with other
    settings than its options fails as it is built."""
    unwrapped = OurFedAvg(num_clients=4, options=PLAIN)
    with pytest.raises(ConfigError) as refused:
        unwrapped.start(None, ArrayRecord(), evaluate_fn=_never_evaluated)  # type: ignore[arg-type]
    assert str(refused.value).startswith(
        "the experiment has privacy=central_fixed but its strategy runs without Flower's "
        "DifferentialPrivacyServerSideFixedClipping around it: no noise would be added"
    )
    strategy = OurFedAvg(num_clients=4, options=PLAIN)
    with pytest.raises(ConfigError) as refused:
        DifferentialPrivacyServerSideFixedClipping(
            strategy, noise_multiplier=0.5, clipping_norm=1.0, num_sampled_clients=4
        )
    said = str(refused.value)
    assert "given noise_multiplier=0.5 but the experiment has privacy.noise_multiplier=0.1" in said
    assert "\n" not in said
    wrapper = DifferentialPrivacyServerSideFixedClipping(
        strategy, noise_multiplier=0.1, clipping_norm=1.0, num_sampled_clients=4
    )
    with pytest.raises(ConfigError) as refused:
        strategy.start(None, ArrayRecord(), evaluate_fn=_never_evaluated)  # type: ignore[arg-type]
    assert str(refused.value) == (
        "the experiment has privacy=central_fixed: call start on Flower's "
        "DifferentialPrivacyServerSideFixedClipping around the strategy, not on the strategy "
        "inside it, whose own start would add no noise"
    )
    assert wrapper.strategy is strategy and strategy.dp_wrapper_mode == "central_fixed"

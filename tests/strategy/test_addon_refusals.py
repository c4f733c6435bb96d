"""Every algorithm has both add-ons mounted; those that cannot take one refuse it by name."""

from __future__ import annotations

import pytest

from fl_system.config.compose import compose_experiment
from fl_system.config.experiment import build_strategy

STEPS = "train.local_steps=5"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algorithm=taco", STEPS, "algorithm.disco.enabled=true"],
            "algorithm.disco.enabled=true cannot be used with taco: TACO weighs clients by",
        ),
        (
            ["algorithm=taco", STEPS, "algorithm.gsnr.enabled=true"],
            "algorithm.gsnr.enabled=true cannot be used with taco: TACO's correction",
        ),
        (
            ["algorithm=fedcat", "algorithm.disco.enabled=true"],
            "algorithm.disco.enabled=true cannot be used with fedcat: FedCat trains model copies",
        ),
        (
            ["algorithm=fedcat", STEPS, "algorithm.gsnr.enabled=true"],
            "algorithm.gsnr.enabled=true cannot be used with fedcat: FedCat trains model copies",
        ),
        (
            ["algorithm=foolsgold", "algorithm.disco.enabled=true"],
            "algorithm.disco.enabled=true cannot be used with foolsgold: FoolsGold weighs",
        ),
        (
            ["algorithm=foolsgold", STEPS, "algorithm.gsnr.enabled=true"],
            "algorithm.gsnr.enabled=true cannot be used with foolsgold: FoolsGold runs as",
        ),
        (
            ["algorithm=fednova", STEPS, "algorithm.gsnr.enabled=true"],
            "algorithm.gsnr.enabled=true cannot be used with fednova: FedNova divides",
        ),
    ],
)
def test_an_addon_the_algorithm_cannot_take_is_refused_with_why(overrides, message) -> None:
    with pytest.raises(ValueError) as err:
        build_strategy(compose_experiment(overrides))
    assert message in str(err.value)


@pytest.mark.parametrize("overrides", [["algorithm=fednova"], ["algorithm=scaffold"]])
def test_an_algorithm_takes_the_addons_it_does_not_refuse(overrides) -> None:
    strategy = build_strategy(compose_experiment([*overrides, "algorithm.disco.enabled=true"]))
    assert [type(a).__name__ for a in strategy.addons] == ["DiscoWeighting"]

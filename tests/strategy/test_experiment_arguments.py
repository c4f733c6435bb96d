"""Strategies built in a Flower app of one's own: what they take from an experiment, and the
experiment of another algorithm refused."""

from __future__ import annotations

import pytest

from fl_system.compose import compose_experiment
from server_app.strategies.fedadam import FedAdam
from server_app.strategies.feddyn import FedDyn
from server_app.strategies.taco import Taco


def test_taco_takes_its_clients_rounds_and_steps_from_the_experiment() -> None:
    taco = Taco(
        experiment=["algorithm=taco", "num_clients=7", "num_rounds=12", "train.local_steps=5"]
    )
    assert taco.num_clients == 7 and taco.lam == 3 and taco.local_steps == 5
    with pytest.raises(ValueError) as err:
        Taco(num_clients=4, experiment=taco.experiment)
    assert str(err.value) == (
        "Taco(num_clients=4) disagrees with its experiment's num_clients=7: give it once"
    )


def test_another_algorithms_experiment_is_refused_unless_its_clients_are_the_same() -> None:
    with pytest.raises(ValueError) as err:
        FedDyn(alpha=0.01, num_clients=4, experiment=compose_experiment(["algorithm=fedavg"]))
    assert str(err.value) == (
        "FedDyn was given the experiment of algorithm=fedavg, whose clients run FedAvgRule; "
        "FedDyn's clients run FedDynRule: compose the experiment with FedDyn's algorithm"
    )
    FedAdam(experiment=["algorithm=fedyogi"])  # FedYogi's clients are FedAdam's: plain SGD

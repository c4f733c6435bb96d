"""Strategies built in a Flower app of one's own: what they take from an experiment, and the
experiment of another algorithm refused."""

from __future__ import annotations

import pytest

from fl_system.config.compose import compose_experiment
from server_app.strategies import FedAvg, FedDisco, FedProx, Scaffold
from server_app.strategies.fedadam import FedAdam
from server_app.strategies.feddyn import FedDyn
from server_app.strategies.taco import Taco


def test_taco_takes_its_clients_rounds_and_steps_from_the_experiment() -> None:
    taco = Taco(
        experiment=["algorithm=taco", "num_clients=7", "num_rounds=12", "train.local_steps=5"]
    )
    assert taco.num_clients == 7 and taco.expulsions.lam == 3 and taco.local_steps == 5
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


def test_plain_arguments_compose_the_experiment_the_clients_learn() -> None:
    disco = FedDisco(metric="l1", a=0.7, fraction_train=0.5, num_clients=4, num_classes=10)
    cfg = disco.experiment
    assert (cfg.algorithm.name, cfg.dataset.name, cfg.model.name) == ("feddisco", "app", "app")
    assert (cfg.algorithm.disco.metric, cfg.algorithm.disco.a, cfg.algorithm.disco.b) == (
        "l1",
        0.7,
        0.1,
    )
    assert cfg.clients_per_round == 2 and cfg.dataset.num_classes == 10
    prox = FedProx(mu=0.05, train={"lr": 0.2}, experiment=["num_clients=3"])
    assert prox.experiment.algorithm.name == "fedprox" and prox.experiment.dataset.name != "app"
    assert (prox.experiment.algorithm.mu, prox.experiment.train.lr) == (0.05, 0.2)
    assert Scaffold(options=["compression.up=st"]).experiment.compression.up.name == "st"


def test_bad_plain_arguments_are_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^train\.lr_typo: no such setting"):
        FedAvg(train={"lr_typo": 1})
    with pytest.raises(ValueError, match=r"^fraction_train must be a number in \(0, 1\], got 0$"):
        FedAvg(fraction_train=0)
    with pytest.raises(ValueError, match=r"^train\.lr must be a positive number, got -1$"):
        FedAvg(train={"lr": -1})
    with pytest.raises(ValueError, match=r"^FedProx\(mu=0\.5\) disagrees with its experiment's"):
        FedProx(mu=0.5, experiment=compose_experiment(["algorithm=fedprox"]))

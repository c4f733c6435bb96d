"""server_app.strategies: one Flower Strategy per algorithm, listed in the README."""

from __future__ import annotations

import re
from pathlib import Path

from flwr.serverapp.strategy import Strategy
from omegaconf import OmegaConf

import server_app.strategies as strategies
from fl_system.config.compose import CONF_DIR

README = Path(__file__).resolve().parents[2] / "README.md"


def _algorithms() -> dict[str, str]:
    """conf/algorithm/<name>.yaml -> the class its strategy builds."""
    return {
        path.stem: str(OmegaConf.load(path).strategy._target_).rsplit(".", 1)[-1]
        for path in sorted((CONF_DIR / "algorithm").glob("*.yaml"))
    }


def test_all_lists_one_flower_strategy_per_algorithm_as_the_readme_does() -> None:
    algorithms = _algorithms()
    assert sorted(strategies.__all__) == sorted(algorithms.values())
    for name in strategies.__all__:
        cls = getattr(strategies, name)
        assert issubclass(cls, Strategy), name
    text = README.read_text()
    section = text[text.index("## Use fl_system's algorithms in your own Flower app") :]
    table = dict(re.findall(r"^\| `(\w+)` \| `(\w+)` \|", section, flags=re.M))
    assert table == algorithms


def test_every_strategy_builds_with_plain_arguments_as_a_flower_strategy() -> None:
    needs = {"FedDisco": {"num_classes": 10}, "Taco": {"local_steps": 5}}
    needs |= {"FedGsnr": {"train": {"local_steps": 5}}, "FedCat": {"k": 1}}
    for name in strategies.__all__:
        built = getattr(strategies, name)(num_clients=4, **needs.get(name, {}))
        assert isinstance(built, Strategy), name
        assert built.experiment.dataset.name == "app" and built.experiment.model.name == "app"
        assert built.experiment.num_clients == 4, name

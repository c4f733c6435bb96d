"""One name per algorithm: its YAML, its strategy (a Flower Strategy in server_app.strategies'
index), its client rule, its files and the README agree."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from flwr.app import ArrayRecord, ConfigRecord
from flwr.serverapp.strategy import Strategy
from omegaconf import OmegaConf

import server_app.strategies as strategies
from client_app.algorithms.base import LocalRule
from fl_system.config.compose import CONF_DIR
from fl_system.settings.value_checks import ConfigError
from server_app.federated.asynchronous import AsynchronousStrategy
from server_app.rounds import RunFailed

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
        cls = getattr(strategies, name)
        if issubclass(cls, AsynchronousStrategy):
            continue  # no rounds for Flower's loop: the next test
        built = cls(num_clients=4, **needs.get(name, {}))
        assert isinstance(built, Strategy), name
        assert built.experiment.dataset.name == "app" and built.experiment.model.name == "app"
        assert built.experiment.num_clients == 4, name


def test_the_asynchronous_strategies_say_in_one_line_what_they_need() -> None:
    """FedBuff and FedAsync order updates by a clock: in simulation a virtual one (system=...),
    on real nodes the wall clock (system=none); their steps are fl-run's to drive, not the
    rounds of Flower's own loop."""
    for cls in (strategies.FedBuff, strategies.FedAsync):
        real = cls(num_clients=4)
        assert isinstance(real, Strategy) and real.experiment.runtime.name != "simulation"
        with pytest.raises(ConfigError, match=r"system.name=profiles is refused with runtime="):
            cls(experiment=["system=profiles"])
        simulated = ["runtime=simulation", "dataset=digits", "model=mlp"]
        with pytest.raises(ConfigError, match=r"system.name=none is refused: .* virtual clock"):
            cls(experiment=simulated)
        built = cls(experiment=[*simulated, "system=profiles"])
        assert built.experiment.system.name == "profiles"
        with pytest.raises(RunFailed, match="has no rounds: it steps as updates arrive"):
            built.configure_train(1, ArrayRecord(), ConfigRecord(), grid=None)  # type: ignore[arg-type]


def test_the_yamls_that_say_asynchronous_are_the_strategies_without_rounds() -> None:
    """`asynchronous: true` (fl-run's progress counts server steps) marks exactly the
    algorithms whose strategy is an AsynchronousStrategy."""
    for path in sorted((CONF_DIR / "algorithm").glob("*.yaml")):
        node = OmegaConf.load(path)
        strategy = importlib.import_module(str(node.strategy._target_).rsplit(".", 1)[0])
        cls = getattr(strategy, str(node.strategy._target_).rsplit(".", 1)[1])
        assert bool(node.get("asynchronous")) == issubclass(cls, AsynchronousStrategy), path.name


ROOT = README.parent
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
BORROWED = re.compile(r"((?:`\w+`(?:, | and ))*`\w+`) trains? as `(\w+)`")


def _borrowed_in_checklist() -> dict[str, str]:
    """Step 2 of the checklist for adding an algorithm (ARCHITECTURE.md): algorithm -> the
    algorithm whose clients it trains as."""
    text = ARCHITECTURE.read_text()
    step = text[text.index("2. `client_app/algorithms/<name>.py`") :]
    step = " ".join(step[: step.index("\n3. ")].split())
    return {
        name: owner
        for names, owner in BORROWED.findall(step)
        for name in re.findall(r"`(\w+)`", names)
    }


def test_one_name_per_algorithm_in_its_yaml_strategy_rule_and_the_readme() -> None:
    """conf/algorithm/<name>.yaml says `name: <name>`, builds server_app.strategies.<name>'s
    class (the one the index exports) and client_app.algorithms.<name>'s rule, or the rule of
    the algorithm the checklist (ARCHITECTURE.md) says it trains as; no rule file is nobody's; the
    README's algorithm reference names each one."""
    borrowed, own_rules = {}, set()
    for path in sorted((CONF_DIR / "algorithm").glob("*.yaml")):
        name, cfg = path.stem, OmegaConf.load(path)
        assert cfg.name == name
        module, cls = str(cfg.strategy._target_).rsplit(".", 1)
        assert module == f"server_app.strategies.{name}"
        assert getattr(strategies, cls) is getattr(importlib.import_module(module), cls)
        rule_module, rule = str(cfg.local_rule._target_).rsplit(".", 1)
        owner = rule_module.removeprefix("client_app.algorithms.")
        assert issubclass(getattr(importlib.import_module(rule_module), rule), LocalRule), name
        if owner == name:
            own_rules.add(name)
        else:
            borrowed[name] = owner
    assert borrowed == _borrowed_in_checklist()
    rule_files = {p.stem for p in (ROOT / "client_app" / "algorithms").glob("*.py")}
    assert rule_files - {"__init__", "base"} == own_rules
    text = README.read_text()
    reference = text[text.index("## Algorithms") : text.index("## Cross-cutting features")]
    unnamed = [
        name
        for name in _algorithms()
        if f"`{name}`" not in reference and f"algorithm={name}" not in reference
    ]
    assert unnamed == []


def test_shared_and_server_math_files_are_named_after_their_algorithm() -> None:
    """fl_system/algorithms/<name>.py (what the halves share) and
    server_app/strategies/<name>_math.py (math only the server uses) exist only for
    algorithms; server_app/strategies/ holds one module per algorithm besides."""
    names = set(_algorithms())
    shared = {p.stem for p in (ROOT / "fl_system" / "algorithms").glob("*.py")} - {"__init__"}
    assert shared <= names
    modules = {p.stem for p in (ROOT / "server_app" / "strategies").glob("*.py")}
    math = {m.removesuffix("_math") for m in modules if m.endswith("_math")}
    assert math <= names
    assert modules - {"__init__", "fedopt"} - {f"{m}_math" for m in math} == names

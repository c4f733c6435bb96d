"""A Flower app of one's own around fl_system's strategies, as the README shows it.

`readme_server_app()` is the README's ServerApp, word for word; `write_app` lays out an app
directory (pyproject.toml + my_app/server_app.py) that `flwr run` submits to a SuperLink, with
this project's ClientApp as its client; `simulate` runs a ServerApp file in Flower's simulation
engine against the same ClientApp.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README_SECTION = "## Use fl_system's algorithms in your own Flower app"

# Runs every case of cases.json next to it with Flower's `Strategy.start` and writes each
# one's central accuracy per round, its strategy's base classes, its rounds and the keys of its
# train metrics to results.json. A case is a list of overrides, or {"overrides": [...],
# "dp_wrapper": {...}}: then the strategy runs inside Flower's server-side fixed-clipping
# wrapper built with those settings. A refusal (ValueError) is the case's result.
LOOP_APP = """
import json
from pathlib import Path

from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping, Strategy

from fl_system.config.compose import compose_experiment
from fl_system.config.experiment import build_strategy, central_evaluation
from fl_system.learning.own_model import build_model

HERE = Path(__file__).parent
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    cases = Path(str(context.run_config.get("cases-file") or HERE / "cases.json"))
    results = {}
    for name, case in json.loads(cases.read_text()).items():
        overrides, wrapper = (case, None) if isinstance(case, list) else (
            case["overrides"], case.get("dp_wrapper")
        )
        try:
            experiment = compose_experiment(overrides)
            strategy = build_strategy(experiment)
            flower = strategy
            if wrapper is not None:
                flower = DifferentialPrivacyServerSideFixedClipping(strategy, **wrapper)
            result = flower.start(
                grid=grid,
                initial_arrays=ArrayRecord(build_model(experiment).state_dict()),
                num_rounds=experiment.num_rounds,
                evaluate_fn=central_evaluation(experiment),
            )
        except ValueError as err:
            results[name] = {"refused": str(err)}
        else:
            results[name] = {
                "is_flower_strategy": isinstance(strategy, Strategy),
                "accuracy": {
                    str(r): m["test_accuracy"]
                    for r, m in result.evaluate_metrics_serverapp.items()
                },
                "train_rounds": sorted(result.train_metrics_clientapp),
                "train_metrics": sorted(result.train_metrics_clientapp.get(1, {})),
            }
        cases.with_name("results.json").write_text(json.dumps(results))
"""

SIMULATE = """
import importlib.util, logging, sys, warnings
from flwr.simulation import run_simulation
from client_app.app import app as client_app

spec = importlib.util.spec_from_file_location("my_server_app", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
logging.getLogger("flwr").setLevel(logging.INFO)
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    run_simulation(
        server_app=module.app,
        client_app=client_app,
        num_supernodes=int(sys.argv[2]),
        backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}},
    )
"""


def readme_block(name: str) -> str:
    """The README's Python block for `my_app/<name>` in its section on one's own Flower app
    (each block opens with a docstring naming its file)."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(README_SECTION) :]
    for block in re.findall(r"```python\n(.*?)```", section, flags=re.S):
        if block.startswith(f'"""my_app/{name}'):
            return block
    raise AssertionError(f"the README's Flower app section has no block for my_app/{name}")


def readme_blocks(language: str) -> list[str]:
    """The README's `language` blocks in its section on one's own Flower app, in order."""
    text = (ROOT / "README.md").read_text()
    section = text[text.index(README_SECTION) :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.S)


def readme_server_app() -> str:
    """The README's ServerApp on an experiment fl_system composes, word for word."""
    return readme_block("server_app.py: FedDisco on an experiment")


def write_app(
    root: Path,
    server_app: str,
    *,
    modules: Mapping[str, str] | None = None,
    serverapp: str = "my_app.server_app:app",
    clientapp: str = "client_app.app:app",
    config: str = 'cases-file = ""',
) -> Path:
    """A Flower app directory: my_app/server_app.py is `server_app`, my_app/<name> each of
    `modules`; its components `serverapp` and `clientapp` (ours by default), its run `config`
    (TOML lines)."""
    (root / "my_app").mkdir(parents=True, exist_ok=True)
    (root / "my_app" / "__init__.py").write_text("")
    (root / "my_app" / "server_app.py").write_text(server_app)
    for name, text in (modules or {}).items():
        (root / "my_app" / name).write_text(text)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n\n'
        '[project]\nname = "my-app"\nversion = "1.0.0"\ndependencies = []\n\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["."]\n\n'
        '[tool.flwr.app]\npublisher = "me"\n\n'
        "[tool.flwr.app.components]\n"
        f'serverapp = "{serverapp}"\nclientapp = "{clientapp}"\n\n'
        f"[tool.flwr.app.config]\n{config}\n"
    )
    return root


def simulate(
    server_app_file: Path, num_supernodes: int, cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    """Run the ServerApp in `server_app_file` against our ClientApp in Flower's simulation."""
    return subprocess.run(
        [sys.executable, "-c", SIMULATE, str(server_app_file), str(num_supernodes)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )

"""A Flower app of one's own, its files word for word from the README: its model and loader,
fl_system's strategies built with plain arguments, our client rules through
`make_client_app`, submitted with `flwr run` to a simulation SuperLink the test starts."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from fl_system.runtime.launch.ports import free_port, port_open
from fl_system.runtime.launch.processes import ProcessGroup, tool_env
from tests.integration.flower_app import readme_block, write_app

pytestmark = pytest.mark.integration

# The test's own ServerApp: FedDisco, SCAFFOLD and TACO with plain arguments, one after the
# other from the same initial model, on the README's model, loader and evaluation.
THREE = """
import json
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import Strategy

from my_app.server_app import evaluate
from my_app.task import Net
from server_app.strategies import FedDisco, Scaffold, Taco

app = ServerApp()
EPOCHS = {"lr": 0.1, "local_epochs": 2, "batch_size": 16}


@app.main()
def main(grid: Grid, context: Context) -> None:
    strategies = {
        "feddisco": lambda: FedDisco(num_clients=4, num_classes=10, a=0.5, b=0.1, train=EPOCHS),
        "scaffold": lambda: Scaffold(num_clients=4, train=EPOCHS),
        "taco": lambda: Taco(
            num_clients=4, num_rounds=3, lam=3, train={"lr": 0.1, "local_steps": 40}
        ),
    }
    results = {}
    for name, build in strategies.items():
        strategy = build()
        torch.manual_seed(0)
        result = strategy.start(
            grid=grid,
            initial_arrays=ArrayRecord(Net().state_dict()),
            num_rounds=3,
            evaluate_fn=evaluate,
        )
        results[name] = {
            "is_flower_strategy": isinstance(strategy, Strategy),
            "accuracy": {
                str(r): m["accuracy"] for r, m in result.evaluate_metrics_serverapp.items()
            },
        }
    Path(str(context.run_config["results-file"])).write_text(json.dumps(results))
"""


def _app(root: Path, serverapp: str) -> Path:
    """The README's app files, with `serverapp` as its ServerApp component."""
    return write_app(
        root,
        readme_block("server_app.py"),
        modules={name: readme_block(name) for name in ("task.py", "client_app.py")}
        | {"three.py": THREE},
        serverapp=serverapp,
        clientapp="my_app.client_app:app",
        config='algorithm = "scaffold"\nresults-file = ""',
    )


def _flwr_run(app: Path, env: dict[str, str], *config: str) -> subprocess.CompletedProcess[str]:
    extra = [arg for c in config for arg in ("--run-config", c)]
    return subprocess.run(
        ["flwr", "run", str(app), "sim", "--stream", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,  # a hang guard: the test's three runs took 66 s here, 566 s in CI
        stdin=subprocess.DEVNULL,
    )


def test_plain_argument_strategies_train_ones_own_model_on_ones_own_loader(
    tmp_path: Path,
) -> None:
    """FedDisco, SCAFFOLD and TACO each beat their initial accuracy by > 20 points in three
    rounds; the README's ServerApp (SCAFFOLD, then FedDisco) runs and saves its model."""
    control, appio = free_port(), free_port()
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(
        '[superlink]\ndefault = "sim"\n\n[superlink.sim]\n'
        f'address = "127.0.0.1:{control}"\ninsecure = true\noptions.num-supernodes = 4\n'
    )
    env = tool_env({"FLWR_HOME": str(home)})
    link_dir = tmp_path / "superlink"  # where the ServerApp saves final_model.pt
    link_dir.mkdir()

    def in_link_dir(cmd, log_path: Path, env: dict[str, str]) -> subprocess.Popen:
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                list(cmd), cwd=link_dir, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            )  # fmt: skip

    group = ProcessGroup()
    try:
        link = group.start(
            "superlink",
            [
                "flower-superlink", "--insecure", "--simulation", "--isolation", "subprocess",
                "--disable-runtime-dependency-installation",
                "--control-api-address", f"127.0.0.1:{control}",
                "--host", "127.0.0.1", "--port", str(appio),
            ],
            tmp_path / "superlink.log",
            env,
            spawner=in_link_dir,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", control):
            assert link.poll() is None and time.monotonic() < deadline, (
                tmp_path / "superlink.log"
            ).read_text()[-3000:]
            time.sleep(0.1)

        results_file = tmp_path / "results.json"
        done = _flwr_run(
            _app(tmp_path / "three", "my_app.three:app"), env, f'results-file="{results_file}"'
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        results = json.loads(results_file.read_text())
        assert sorted(results) == ["feddisco", "scaffold", "taco"], done.stdout[-3000:]
        for name, got in results.items():
            accuracy = got["accuracy"]
            assert got["is_flower_strategy"] and sorted(accuracy) == ["0", "1", "2", "3"], name
            assert accuracy["3"] > accuracy["0"] + 0.2, (name, accuracy)

        readme_app = _app(tmp_path / "readme", "my_app.server_app:app")
        for config in ((), ('algorithm="feddisco"',)):
            (link_dir / "final_model.pt").unlink(missing_ok=True)
            done = _flwr_run(readme_app, env, *config)
            assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
            assert (link_dir / "final_model.pt").stat().st_size > 0, config
        assert link.poll() is None, "the SuperLink died"
    finally:
        group.stop()

"""A Flower app of one's own, its files word for word from the README: its model and loader,
fl_system's strategies built with plain arguments, our client rules through
`make_client_app`, submitted with `flwr run` to a simulation SuperLink the test starts."""

from __future__ import annotations

import contextlib
import json
import re
import shlex
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from fl_system.runtime.launch.ports import free_port, port_open
from fl_system.runtime.launch.processes import ProcessGroup, descendants, tool_env
from tests.integration.flower_app import readme_block, readme_blocks, write_app

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


def _three_app(root: Path) -> Path:
    """The README's app files, with the test's THREE as its ServerApp."""
    return write_app(
        root,
        readme_block("server_app.py"),
        modules={name: readme_block(name) for name in ("task.py", "client_app.py")}
        | {"three.py": THREE},
        serverapp="my_app.three:app",
        clientapp="my_app.client_app:app",
        config='algorithm = "scaffold"\nresults-file = ""',
    )


def _readme_app(root: Path, server_app: str = "server_app.py") -> Path:
    """The README's app as a user copies it: its pyproject.toml and its three modules, the
    ServerApp the README's block for `my_app/<server_app>`."""
    (root / "my_app").mkdir(parents=True)
    (root / "my_app" / "__init__.py").write_text("")
    for name in ("task.py", "client_app.py"):
        (root / "my_app" / name).write_text(readme_block(name))
    (root / "my_app" / "server_app.py").write_text(readme_block(server_app))
    (root / "pyproject.toml").write_text(readme_blocks("toml")[0])
    return root


def _readme_commands(port: int) -> tuple[list[str], list[list[str]]]:
    """The README's SuperLink command and its `flwr run` commands, on `port` (the README's
    9092 may be taken on a test machine)."""
    text = readme_blocks("bash")[0].replace("\\\n", " ").replace("9092", str(port))
    lines = [line.split(" #")[0].strip() for line in text.splitlines()]
    superlink = shlex.split(lines[0].removesuffix("&"))
    return superlink, [shlex.split(line) for line in lines if line.startswith("flwr run")]


def _flwr_run(cmd: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        cmd,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,  # a hang guard: the test's three runs took 66 s here, 566 s in CI
        stdin=subprocess.DEVNULL,
    )


@dataclass(frozen=True)
class Link:
    """The README's simulation SuperLink, started once for this module's tests."""

    process: subprocess.Popen
    env: dict[str, str]
    workdir: Path  # its working directory: where a ServerApp saves final_model.pt
    runs: list[list[str]]  # the README's `flwr run` commands, on its port


@pytest.fixture(scope="module")
def superlink(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Link]:
    """The README's SuperLink command and Flower configuration, on a free port."""
    tmp_path = tmp_path_factory.mktemp("own-flower-app")
    port = free_port()
    home = tmp_path / "flwr-home"
    home.mkdir()
    (home / "config.toml").write_text(readme_blocks("toml")[1].replace("9092", str(port)))
    env = tool_env({"FLWR_HOME": str(home)})
    link_dir = tmp_path / "superlink"
    link_dir.mkdir()
    superlink, runs = _readme_commands(port)

    def in_link_dir(cmd, log_path: Path, env: dict[str, str]) -> subprocess.Popen:
        with open(log_path, "ab") as log:
            return subprocess.Popen(
                list(cmd), cwd=link_dir, stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
            )  # fmt: skip

    group = ProcessGroup()
    try:
        link = group.start("superlink", superlink, tmp_path / "superlink.log", env,
                           spawner=in_link_dir)  # fmt: skip
        deadline = time.monotonic() + 60
        while not port_open("127.0.0.1", port):
            assert link.poll() is None and time.monotonic() < deadline, (
                tmp_path / "superlink.log"
            ).read_text()[-3000:]
            time.sleep(0.1)
        yield Link(link, env, link_dir, runs)
    finally:
        group.stop()


def test_plain_argument_strategies_train_ones_own_model_on_ones_own_loader(
    superlink: Link, tmp_path: Path
) -> None:
    """FedDisco, SCAFFOLD and TACO each beat their initial accuracy by > 20 points in three
    rounds; the README's app, copied as written (its pyproject.toml, its Flower configuration,
    its commands), runs SCAFFOLD, then FedDisco, and saves its model each time."""
    runs = superlink.runs
    results_file = tmp_path / "results.json"
    three = [*runs[0], "--run-config", f'results-file="{results_file}"']
    done = _flwr_run(three, _three_app(tmp_path / "three"), superlink.env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(results_file.read_text())
    assert sorted(results) == ["feddisco", "scaffold", "taco"], done.stdout[-3000:]
    for name, got in results.items():
        accuracy = got["accuracy"]
        assert got["is_flower_strategy"] and sorted(accuracy) == ["0", "1", "2", "3"], name
        assert accuracy["3"] > accuracy["0"] + 0.2, (name, accuracy)

    readme_app = _readme_app(tmp_path / "readme")
    assert len(runs) == 2
    for run in runs:
        final = superlink.workdir / "final_model.pt"
        final.unlink(missing_ok=True)
        done = _flwr_run(run, readme_app, superlink.env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "deprecated" not in done.stdout + done.stderr
        assert final.stat().st_size > 0, run
    _nothing_outlives_the_runs(superlink)


def test_the_readmes_dp_and_secagg_variants_train_their_model_privately(
    superlink: Link, tmp_path: Path
) -> None:
    """The README's server_app.py under central DP and under SecAgg+, each as written in the
    README's app and run by its first command: the saved model scores far above chance (10 %)
    on the held-out digits; Flower's DP wrapper added its noise (std sigma C / 4) in each of
    the three rounds; SecAgg+ summed all four clients in each round (the round's metrics, as
    the strategy's start logs them)."""
    for variant in ("central DP", "SecAgg+"):
        root = tmp_path / variant.replace(" ", "_").replace("+", "plus")
        app = _readme_app(root, f"server_app.py under {variant}")
        final = superlink.workdir / "final_model.pt"
        final.unlink(missing_ok=True)
        started = time.monotonic()
        done = _flwr_run(superlink.runs[0], app, superlink.env)
        said = done.stdout + done.stderr
        assert done.returncode == 0 and "Traceback" not in said, said[-3000:]
        accuracy = _accuracy(final)
        print(f"{variant}: final accuracy {accuracy:.3f} in {time.monotonic() - started:.0f} s")
        assert accuracy > 0.5, (variant, accuracy)
        if variant == "central DP":
            assert said.count("central DP noise with 0.0250 stdev added") == 3, said[-3000:]
        else:
            assert len(re.findall(r"'secagg_summed': 4\b", said)) == 3, said[-3000:]
            assert "secagg_error_bound" in said and "bytes_up_secagg_unmask" in said
    _nothing_outlives_the_runs(superlink)


def _accuracy(model_file: Path) -> float:
    """The saved model's accuracy on the README's held-out digits (its task.py's)."""
    task: dict = {}
    exec(readme_block("task.py"), task)  # the README's own model and test set
    model = task["Net"]()
    model.load_state_dict(torch.load(model_file))
    x, y = task["test_set"]()
    with torch.no_grad():
        return (model(x).argmax(dim=1) == y).float().mean().item()


def _nothing_outlives_the_runs(link: Link) -> None:
    """The SuperLink still serves, and no process of a finished run is left."""
    assert link.process.poll() is None, "the SuperLink died"
    deadline = time.monotonic() + 30
    while left := _simulations_under(link.process.pid):
        assert time.monotonic() < deadline, f"runs' processes still alive: {left}"
        time.sleep(0.2)


def _simulations_under(pid: int) -> list[str]:
    """The command lines of the flwr-simulation processes below `pid`."""
    found = []
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
            if b"flwr-simulation" in cmdline:
                found.append(cmdline.decode(errors="replace"))
    return found

"""One's own model, written by the test into a module fl_system has never seen, in every
algorithm (simulation sweeps), and every way it can be wrong refused by fl-run before round 1."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from fl_system.records.results import MetricsLog
from tests.integration.conftest import holding, run_cli, run_every_algorithm

pytestmark = pytest.mark.integration

MODELS = textwrap.dedent(
    """
    import torch
    from torch import nn


    class Plain(nn.Module):
        '''No features/classifier children: a forward that returns logits.'''

        def __init__(self, input_shape, num_classes, width=32):
            super().__init__()
            size = 1
            for v in input_shape:
                size *= v
            self.body = nn.Sequential(nn.Flatten(), nn.Linear(size, width), nn.ReLU())
            self.head = nn.Linear(width, num_classes)

        def forward(self, x):
            return self.head(self.body(x))


    class Normed(nn.Module):
        '''BatchNorm: floating running statistics and an integer counter among its buffers.'''

        def __init__(self, *, num_classes):
            super().__init__()
            self.conv = nn.Sequential(
                nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten()
            )
            self.out = nn.Linear(8 * 8 * 8, num_classes)

        def forward(self, x):
            return self.out(self.conv(x))


    def small(num_classes, input_shape):
        '''A factory function.'''
        return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[-1] * input_shape[-2], 16),
                             nn.ReLU(), nn.Linear(16, num_classes))


    class Wide(Plain):
        def forward(self, x):
            return torch.cat([super().forward(x), super().forward(x)], dim=1)


    class Counted(Plain):
        def __init__(self, input_shape, num_classes):
            super().__init__(input_shape, num_classes)
            self.seen = nn.Parameter(torch.zeros(1, dtype=torch.long), requires_grad=False)
    """
)
COMMON = ["dataset=digits", "runtime=simulation", "num_rounds=2", "train.local_steps=15"]


def _own(tmp_path: Path, target: str) -> list[str]:
    source = tmp_path / "tinynets.py"
    source.write_text(MODELS)
    return ["model=custom", f"model._target_=tinynets.{target}", f"model.source={source}"]


@pytest.mark.parametrize(
    ("target", "layer"), [("Plain", "body"), ("Normed", "conv"), ("small", "2")]
)
def test_every_algorithm_trains_an_own_model_two_rounds(
    target: str, layer: str, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """A plain model, one with BatchNorm and a factory's, each under every algorithm (MOON's
    features from model.feature_layer): a warm simulation sweep."""
    common = [*COMMON, *_own(tmp_path, target), f"model.feature_layer={layer}"]
    for member in run_every_algorithm(common, tmp_path, cli_env):
        rows = MetricsLog(member / "metrics.csv").rows()
        assert float(rows[-1]["test_accuracy"]) > 0.25, member.name  # chance: 0.1


@pytest.mark.parametrize(
    ("target", "extra", "expected"),
    [
        (
            "Missing",
            [],
            "fl-run: error: model._target_=tinynets.Missing: tinynets has no class or "
            "function Missing",
        ),
        (
            "Plain",
            ["model.depth=3"],
            "fl-run: error: model.depth is not an argument of tinynets.Plain(input_shape, "
            "num_classes, width=32)",
        ),
        (
            "Normed",
            ["dataset=synthetic", "partition=natural"],
            "fl-run: error: model Normed: its forward fails on a batch of shape [2, 60] (the "
            "task's input shape [60]): RuntimeError: ",
        ),
        (
            "Wide",
            [],
            "fl-run: error: model Wide returns [2, 20] for a batch of 2; the task needs [2, 10]",
        ),
        (
            "Counted",
            [],
            "fl-run: error: model Counted: parameter seen is torch.int64, not floating point",
        ),
        (
            "Plain",
            ["algorithm=moon"],
            "fl-run: error: algorithm=moon contrasts the model's penultimate features: give "
            "the model `features` and `classifier` children, or name the child that computes "
            "them with model.feature_layer=NAME; Plain has neither (its children: body, "
            "body.0, body.1, body.2, head)",
        ),
    ],
)
def test_a_model_that_does_not_fit_is_refused_before_round_1(
    target: str, extra: list[str], expected: str, tmp_path: Path, cli_env: dict[str, str]
) -> None:
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            "dataset=digits",
            "runtime=simulation",
            *_own(tmp_path, target),
            *extra,
            f"hydra.run.dir={run_dir}",
        ],
        cli_env,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().startswith(expected), result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not run_dir.exists() and not holding(tmp_path)


DRIFTING = textwrap.dedent(
    """
    import setproctitle
    from torch import nn


    class Drifting(nn.Module):
        '''Wider where a ClientApp builds it: a node with another version of the package.'''

        def __init__(self, input_shape, num_classes):
            super().__init__()
            width = 48 if "clientapp" in setproctitle.getproctitle() else 32
            self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.ReLU())
            self.head = nn.Linear(width, num_classes)

        def forward(self, x):
            return self.head(self.body(x))
    """
)


def test_a_node_that_builds_another_model_is_named_before_round_1(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """runtime=local (a SuperLink and SuperNodes over gRPC): the nodes' ClientApps build the
    model wider than the server does; the run stops at the handshake, exit 2."""
    (tmp_path / "drifting.py").write_text(DRIFTING)
    run_dir = tmp_path / "run"
    result = run_cli(
        [
            "dataset=digits",
            "runtime=local",
            "num_clients=2",
            "model=custom",
            "model._target_=drifting.Drifting",
            f"model.source={tmp_path / 'drifting.py'}",
            f"hydra.run.dir={run_dir}",
        ],
        cli_env,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert (
        ": builds another model than the server: layer body.1.weight is [48, 64] torch.float32 "
        "there, [32, 64] torch.float32 here"
    ) in result.stderr
    assert "Traceback" not in result.stderr
    assert not (run_dir / "metrics.csv").exists() and not holding(tmp_path)


SHIPPED = textwrap.dedent(
    """
    import os
    from torch import nn

    with open(os.environ["OWN_MODEL_IMPORTS"], "a") as imports:
        imports.write(__file__ + "\\n")


    class Tiny(nn.Module):
        def __init__(self, input_shape, num_classes):
            super().__init__()
            self.net = nn.Sequential(
                nn.Flatten(), nn.Linear(64, 16), nn.ReLU(), nn.Linear(16, num_classes)
            )

        def forward(self, x):
            return self.net(x)
    """
)


def test_the_models_code_travels_in_the_fab_to_the_nodes(
    tmp_path: Path, cli_env: dict[str, str]
) -> None:
    """runtime=local (SuperLink, SuperNodes, `flwr run`): model.source is copied into the FAB;
    every ClientApp and the ServerApp import the copy Flower installed from it, only fl-run's
    own check imports the submitter's file."""
    source = tmp_path / "submitter" / "ownnets.py"
    source.parent.mkdir()
    source.write_text(SHIPPED)
    imports = tmp_path / "imports.txt"
    result = run_cli(
        [
            "dataset=digits",
            "runtime=local",
            "num_clients=2",
            "num_rounds=2",
            "model=custom",
            "model._target_=ownnets.Tiny",
            f"model.source={source}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        {**cli_env, "OWN_MODEL_IMPORTS": str(imports)},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(MetricsLog(tmp_path / "run" / "metrics.csv").rows()) == 2
    paths = imports.read_text().split()
    assert paths.count(str(source)) == 1  # fl-run's check, on the submitting machine
    shipped = [p for p in paths if p != str(source)]
    assert len(shipped) >= 5  # the ServerApp and a ClientApp per message
    assert all("/apps/" in p and p.endswith("/shipped_model/ownnets.py") for p in shipped)

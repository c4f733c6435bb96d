"""A simulation whose ClientApp processes die: said at once, with what died and where its
traceback is."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.integration.conftest import QUICK, run_cli

pytestmark = pytest.mark.integration

SIM = ["runtime=simulation", *QUICK]

DIES_IN_RAY_WORKERS = """
import os, sys
import torch.nn as nn


class DiesInRayWorkers(nn.Module):
    \"\"\"A model whose construction ends the process when it is a Ray worker (a ClientApp
    actor): an OOM kill or a crash in native code, as Ray sees it.\"\"\"

    def __init__(self, input_shape, num_classes):
        super().__init__()
        worker = sys.modules.get("ray._private.worker")
        mode = getattr(getattr(worker, "global_worker", None), "mode", None)
        if mode is not None and mode == getattr(worker, "WORKER_MODE", -1):
            os._exit(1)
        self.net = nn.Sequential(nn.Flatten(), nn.Linear(64, num_classes))

    def forward(self, x):
        return self.net(x)
"""


def test_clientapp_processes_that_die_stop_the_run_at_once_saying_so(
    tmp_path: Path, cli_env
) -> None:
    """Flower's Ray backend, every ClientApp actor's process dead at the handshake: the run
    stops in seconds with Ray's error and where its traceback is, not after round_timeout with
    advice about SuperNodes and the Fleet API."""
    source = tmp_path / "dying.py"
    source.write_text(DIES_IN_RAY_WORKERS)
    started = time.monotonic()
    result = run_cli(
        [
            *SIM, "runtime.backend=ray", "model=custom", "model._target_=dying.DiesInRayWorkers",
            f"model.source={source}", "round_timeout=600", f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cli_env,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-2000:]
    assert (
        "fl-run: error: the ClientApp failed the handshake on all 2 SuperNodes: "
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task. "
        "(logs/serverapp.log has its traceback)" in result.stderr
    ), result.stderr[-2000:]
    assert "Fleet API" not in result.stderr
    assert time.monotonic() - started < 200

"""When fl-run starts the local runtime's processes early: only to overlap an import. With the
parts' checks imported already (a sweep's later member, an fl-run forked warm), a bad part is
found before any process starts; a bad dataset is still checked while the runtime starts."""

from __future__ import annotations

import contextlib
import io
import multiprocessing
import sys
from pathlib import Path

import torch
from threadpoolctl import threadpool_limits

import fl_system.config.preflight  # noqa: F401  the checks imported, as in a sweep's later member
from fl_system import cli
from fl_system.runtime.launch.local import LocalRuntime

CHILD_SECONDS = 300  # fl-run's checks take seconds; a slow CI machine several times that


def _fl_run(root: Path, *args: str) -> tuple[int, list[str], str]:
    """fl-run's exit code, its runtime's `start` and `stop` calls (nothing is started) and
    its error output. It runs in a forked child: Hydra's logging set-up closes every logging
    handler of the process it runs in, pytest's among them. The child computes on one thread:
    the first parallel region of a fork whose parent's OpenMP pool has run waits forever for
    the pool's threads, which the fork did not copy."""
    fork = multiprocessing.get_context("fork")
    ours, theirs = fork.Pipe()

    def child() -> None:
        torch.set_num_threads(1)
        threadpool_limits(1)
        calls: list[str] = []
        LocalRuntime.start = lambda self, cfg, paths: calls.append("start")  # type: ignore[method-assign]
        LocalRuntime.stop = lambda self: calls.append("stop")  # type: ignore[method-assign]
        sys.argv = ["fl-run", *args, f"hydra.run.dir={root / 'run'}"]
        err = io.StringIO()
        code: object = 0
        with contextlib.redirect_stderr(err):
            try:
                cli.main()
            except SystemExit as stopped:
                code = stopped.code
        theirs.send((code, calls, err.getvalue()))

    process = fork.Process(target=child)
    process.start()
    theirs.close()  # the child's end: a child that dies unheard is an EOF here, not a hang
    try:
        assert ours.poll(CHILD_SECONDS), f"fl-run said nothing in {CHILD_SECONDS} s"
        return ours.recv()
    finally:
        process.kill()
        process.join()


def test_a_bad_part_starts_no_process(tmp_path: Path) -> None:
    code, calls, err = _fl_run(
        tmp_path, "algorithm=taco", "train.local_steps=5", "algorithm.kappa=1.5"
    )
    assert code == 2 and calls == []
    assert "algorithm.kappa must be a number in (0, 1], got 1.5" in err


def test_a_bad_dataset_size_is_found_while_the_runtime_starts(tmp_path: Path) -> None:
    code, calls, err = _fl_run(tmp_path, "dataset=digits", "model=mlp", "num_clients=5000")
    assert code == 2 and calls == ["start", "stop"], err
    assert not (tmp_path / "run").exists()

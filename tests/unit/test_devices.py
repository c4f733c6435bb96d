"""Thread counts: what a runtime gives its processes, and the server evaluation's own count."""

from __future__ import annotations

import os

import pytest
import torch

from fl_system.learning.devices import EVAL_THREADS_ENV, evaluation_threads, thread_env


@pytest.fixture(autouse=True)
def one_thread() -> None:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_the_server_evaluates_on_the_cores_its_idle_clients_leave(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert thread_env(1)[EVAL_THREADS_ENV] == str(cores)
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's cap
    assert thread_env(1)[EVAL_THREADS_ENV] == "3"


def test_evaluation_threads_are_set_inside_and_restored_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(EVAL_THREADS_ENV, "2")
    with evaluation_threads(None):
        assert torch.get_num_threads() == 2
    assert torch.get_num_threads() == 1
    with evaluation_threads(3):  # server.torch_threads wins
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == 1
    monkeypatch.delenv(EVAL_THREADS_ENV)
    with evaluation_threads(None):  # no runtime said: as it is
        assert torch.get_num_threads() == 1
    with pytest.raises(RuntimeError), evaluation_threads(2):
        raise RuntimeError("an evaluation that fails")
    assert torch.get_num_threads() == 1

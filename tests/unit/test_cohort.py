"""A chunk's threads meet in a Cohort: each hands over its job or leaves, the last one trains
every job in lockstep, and each ends where it would have ended training alone."""

from __future__ import annotations

import copy
import threading

import pytest
import torch
from torch import nn

from client_app.algorithms.base import LocalRule
from client_app.algorithms.fedavg import FedAvgRule
from client_app.algorithms.fedprox import FedProxRule
from client_app.algorithms.scaffold import ScaffoldRule
from fl_system.learning.cohort import Cohort, Job, joined, leave_now, member, train_together
from fl_system.learning.models import MLP
from fl_system.learning.sgd import Sgd

SETTINGS = {"lr": 0.1, "momentum": 0.9, "weight_decay": 1e-3}


def _batches(n: int, seed: int, batch: int = 8) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x, y = torch.randn((n, 12), generator=g), torch.randint(0, 4, (n,), generator=g)
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)]


def _alone(model: nn.Module, batches) -> float:
    optimizer, total = Sgd(model.parameters(), **SETTINGS), 0.0
    for x, y in batches:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total


def _job(model: nn.Module, batches) -> Job:
    return Job(model, iter(batches), loss=nn.functional.cross_entropy, **SETTINGS)


def test_threads_that_train_or_leave_end_as_each_trained_alone() -> None:
    """Five threads: three train (16, 21 and 5 examples: batches of 8, 8 and 5 long, the
    last ones short), one leaves without training, one leaves before the others arrive."""
    torch.manual_seed(0)
    start = MLP(input_shape=[12], num_classes=4, hidden=[16])
    sizes = [16, 21, 5]
    data = [_batches(n, seed) for seed, n in enumerate(sizes)]
    expected = []
    for batches in data:
        model = copy.deepcopy(start)
        expected.append((model, _alone(model, batches)))
    cohort = Cohort(5)
    jobs = [_job(copy.deepcopy(start), batches) for batches in data]
    order = threading.Barrier(2)  # the early leaver goes before anyone trains

    def trains(job: Job) -> None:
        with member(cohort):
            assert joined() is cohort
            cohort.train(job)
            assert joined() is None  # a second training in the same message trains alone

    def leaves(early: bool) -> None:
        with member(cohort):
            if early:
                leave_now()
                order.wait()

    threads = [threading.Thread(target=leaves, args=(True,))]
    threads[0].start()
    order.wait()
    threads += [threading.Thread(target=trains, args=(job,)) for job in jobs]
    threads.append(threading.Thread(target=leaves, args=(False,)))
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive()
    for job, batches, (model, loss_sum) in zip(jobs, data, expected, strict=True):
        assert job.steps == len(batches)
        assert job.loss_sum == pytest.approx(loss_sum, rel=1e-5)
        for got, want in zip(job.model.parameters(), model.parameters(), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


def test_a_failed_training_is_raised_in_every_thread_that_waited() -> None:
    """Batches of 7 features for a model of 12: the lockstep raises in the last thread to
    arrive, and both threads raise it."""
    cohort, errors = Cohort(2), []
    model = MLP(input_shape=[12], num_classes=4)

    def trains(job: Job) -> None:
        with member(cohort):
            try:
                cohort.train(job)
            except RuntimeError as err:
                errors.append(err)

    wrong = [(torch.ones(3, 7), torch.zeros(3, dtype=torch.long))]
    jobs = [_job(copy.deepcopy(model), wrong) for _ in range(2)]
    threads = [threading.Thread(target=trains, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(errors) == 2 and all("lockstep training failed" in str(e) for e in errors)


def test_jobs_of_other_settings_train_in_locksteps_of_their_own() -> None:
    torch.manual_seed(1)
    start, data = MLP(input_shape=[12], num_classes=4), _batches(16, 3)
    slow = Job(copy.deepcopy(start), iter(data), lr=0.01, momentum=0.0, weight_decay=0.0,
               loss=nn.functional.cross_entropy)  # fmt: skip
    fast = _job(copy.deepcopy(start), data)
    train_together([slow, fast])
    alone = copy.deepcopy(start)
    _alone(alone, data)
    for got, want in zip(fast.model.parameters(), alone.parameters(), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)
    assert not torch.allclose(next(slow.model.parameters()), next(fast.model.parameters()))


@pytest.mark.parametrize(
    ("rule", "hooks"),
    [
        (FedAvgRule, ()),
        (LocalRule, ()),
        (FedProxRule, ("loss_term",)),
        (ScaffoldRule, ("after_step",)),
    ],
)
def test_a_rule_names_the_step_hooks_that_keep_it_out_of_the_lockstep(rule, hooks) -> None:
    assert rule.steps_alone() == hooks

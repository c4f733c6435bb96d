"""A chunk of a round's clients met in one place to train in lockstep
(`runtime.backend=vectorized`).

The vectorised backend answers each train message of a chunk in a thread of its own, through
the whole ClientApp: its mods, its rule's begin and finish, compression, the reply. Where a
client would run its local steps alone, its thread hands them to the chunk's `Cohort` as a
`Job` and waits; once every thread of the chunk has either handed its job over or ended without
one (a freeloader, a refused message, a SecAgg+ stage), the last of them trains every job at
once (`LockstepSgd`) and all go on with their own models trained. Everything around the
steps is so the ClientApp's own code, per client, unchanged.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from fl_system.learning.lockstep import LockstepSgd, Loss

Batches = Iterator[tuple[torch.Tensor, torch.Tensor]]


@dataclass
class Job:
    """One client's local steps, as it would take them alone: its model (trained in place),
    its batches in its own order, `Sgd`'s settings and its loss; `steps` and `loss_sum` (the
    sum of its steps' losses) are filled in by the training."""

    model: nn.Module
    batches: Batches
    lr: float
    momentum: float
    weight_decay: float
    loss: Loss
    steps: int = 0
    loss_sum: float = 0.0


class Cohort:
    """The rendezvous of `members` threads, each of which calls `train` once or leaves.

    Parameters
    ----------
    members : int
        How many threads answer the chunk's messages (each must end inside `member`).
    """

    def __init__(self, members: int) -> None:
        self._lock = threading.Lock()
        self._awaited = members
        self._jobs: list[Job] = []
        self._trained = threading.Event()
        self._error: BaseException | None = None
        # one member at a time runs outside the lockstep: the members' Python work is serial
        # under the interpreter lock anyway, and 100 threads taking turns at every torch call
        # that releases it spent more time handing it over than working
        self.turn = threading.Lock()

    def train(self, job: Job) -> None:
        """Train `job` with the others; returns once every job of the chunk is trained."""
        _this_thread.arrived = True
        with self._lock:
            self._jobs.append(job)
            last = self._check_in()
        self.turn.release()
        if last:
            self._train_all()
        self._trained.wait()
        self.turn.acquire()
        if self._error is not None:
            raise RuntimeError("the chunk's lockstep training failed") from self._error

    def leave(self) -> None:
        """A thread that will not train: the others need not wait for it."""
        with self._lock:
            last = self._check_in() and bool(self._jobs)
        if last:
            self._train_all()

    def _check_in(self) -> bool:
        self._awaited -= 1
        return self._awaited == 0

    def _train_all(self) -> None:
        try:
            train_together(self._jobs)
        except BaseException as err:  # every waiting thread raises it, not only this one
            self._error = err
        finally:
            self._trained.set()


class _ThisThread(threading.local):
    cohort: Cohort | None = None
    arrived: bool = False


_this_thread = _ThisThread()


@contextmanager
def member(cohort: Cohort) -> Iterator[None]:
    """This thread answers one message of `cohort`'s chunk; ending, it leaves the cohort if
    it trained nothing, so that nobody waits for it."""
    cohort.turn.acquire()
    _this_thread.cohort, _this_thread.arrived = cohort, False
    try:
        yield
    finally:
        arrived, _this_thread.cohort = _this_thread.arrived, None
        cohort.turn.release()
        if not arrived:
            cohort.leave()


def joined() -> Cohort | None:
    """The cohort this thread's training is to join, or None (it trains alone): outside the
    vectorised backend, or once this thread's job is in."""
    return None if _this_thread.arrived else _this_thread.cohort


def leave_now() -> None:
    """This thread's training will not join (its rule steps alone): let the others go."""
    cohort = joined()
    if cohort is not None:
        _this_thread.arrived = True
        cohort.leave()


def train_together(jobs: list[Job]) -> None:
    """Train every job: those alike (model layout, settings, loss) in one lockstep each."""
    groups: dict[tuple, list[Job]] = defaultdict(list)
    for job in jobs:
        groups[_alike(job)].append(job)
    for group in groups.values():
        _train_group(group)


def _alike(job: Job) -> tuple:
    state = job.model.state_dict()
    layout = tuple((k, tuple(v.shape), v.dtype, v.device) for k, v in state.items())
    return type(job.model), layout, job.lr, job.momentum, job.weight_decay, job.loss


def _train_group(jobs: list[Job]) -> None:
    """Step every job while it has batches; a step's clients are grouped by batch shape (a
    partition's last batch is smaller), so no batch is padded."""
    first = jobs[0]
    trainer = LockstepSgd(
        [job.model for job in jobs],
        lr=first.lr,
        momentum=first.momentum,
        weight_decay=first.weight_decay,
        loss=first.loss,
    )
    active = list(range(len(jobs)))
    while active:
        drawn = [(i, next(jobs[i].batches, None)) for i in active]
        active = [i for i, batch in drawn if batch is not None]
        by_shape: dict[tuple, list[tuple[int, tuple[torch.Tensor, torch.Tensor]]]] = {}
        for i, batch in drawn:
            if batch is not None:
                by_shape.setdefault((batch[0].shape, batch[1].shape), []).append((i, batch))
        for members in by_shape.values():
            index = [i for i, _ in members]
            x = torch.stack([batch[0] for _, batch in members])
            y = torch.stack([batch[1] for _, batch in members])
            losses = trainer.step(x, y, torch.tensor(index))  # every client: no indexing
            for i, loss in zip(index, losses.tolist(), strict=True):
                jobs[i].steps += 1
                jobs[i].loss_sum += loss
    with torch.no_grad():
        for i, job in enumerate(jobs):
            job.model.load_state_dict(trainer.client_state(i))

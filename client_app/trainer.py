"""Local training engine: seeded mini-batch SGD with a rule's hooks."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
from flwr.app import ConfigRecord, RecordDict
from omegaconf import DictConfig, OmegaConf
from torch import nn

from client_app.algorithms.base import LocalContext, LocalRule
from client_app.state import ClientState
from fl_system.data.node_data.streamed import Streamed
from fl_system.learning.cohort import Job, joined, leave_now
from fl_system.learning.evaluation import evaluate
from fl_system.learning.lockstep import lockstep_problem
from fl_system.learning.model_parts import Parts, forward_parts
from fl_system.learning.seeding import seed_torch
from fl_system.learning.sgd import Sgd
from fl_system.messages import protocol


@dataclass(frozen=True)
class TrainSettings:
    """How one round of local training runs (all of it comes from the server's config)."""

    local_epochs: int = 1
    local_steps: int | None = None  # when set, overrides epochs: exactly this many steps
    batch_size: int = 32
    lr: float = 0.05
    momentum: float = 0.0
    weight_decay: float = 0.0
    drop_last: bool = False

    @classmethod
    def for_message(cls, train: DictConfig, config: ConfigRecord) -> TrainSettings:
        """The run's train.* settings, with the ones this message overrides for this client."""
        settings = OmegaConf.to_container(train)
        assert isinstance(settings, dict)
        for key, value in config.items():
            if key.startswith(protocol.TRAIN_OVERRIDE):
                name = key[len(protocol.TRAIN_OVERRIDE) :]
                if name not in settings:
                    raise ValueError(f"the server overrides unknown setting train.{name}")
                settings[name] = value
        return cls(**settings)


@dataclass(frozen=True)
class TrainResult:
    num_examples: int
    mean_loss: float
    steps: int
    seconds: float
    extras: RecordDict
    local_eval: tuple[float, float] | None = None  # (accuracy, loss) after the local steps


def batches(n: int, settings: TrainSettings, generator: torch.Generator):
    """Index batches for the round: shuffled epochs, or a fixed number of steps."""
    size = min(settings.batch_size, n)
    steps_left = settings.local_steps
    epochs = settings.local_epochs if steps_left is None else None
    epoch = 0
    while epochs is None or epoch < epochs:
        order = torch.randperm(n, generator=generator)
        stop = n - (n % size) if settings.drop_last else n
        for start in range(0, stop, size):
            if steps_left is not None:
                if steps_left == 0:
                    return
                steps_left -= 1
            yield order[start : start + size]
        epoch += 1


READ_AHEAD = 16  # a streamed node's batches read (and normalised) at once


def _batches_of(
    x: np.ndarray | Streamed,
    xs: torch.Tensor | None,
    ys: torch.Tensor,
    order: Iterator[torch.Tensor],
    device: torch.device,
    ahead: int,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The batches of `order`: indexed on the device when the records are there (`xs`), else
    read from the streamed records `ahead` batches at a time (one read, not `ahead`)."""
    if xs is not None:
        for idx in order:
            on = idx.to(device)
            yield xs[on], ys[on]
        return
    pending: list[torch.Tensor] = []
    for idx in itertools.chain(order, [None]):
        if idx is not None:
            pending.append(idx)
            if len(pending) < ahead:
                continue
        if not pending:
            return
        block = torch.as_tensor(x[torch.cat(pending).numpy()]).to(device)
        at = 0
        for part in pending:
            yield block[at : at + len(part)], ys[part.to(device)]
            at += len(part)
        pending = []


def _move(model: nn.Module, device: torch.device) -> nn.Module:
    """`model` on `device`: `Module.to` walks every module and parameter in Python even when
    all are there already (per client and message; the vectorised backend's threads queued
    on the interpreter lock behind it)."""
    there = all(p.device == device for p in model.parameters())
    return model if there and next(model.buffers(), None) is None else model.to(device)


def _squared_error(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """task=regression's loss: the mean squared error of the model's one output."""
    return nn.functional.mse_loss(out[:, 0], target)


def _steps_alone(
    model: nn.Module,
    steps: Iterator[tuple[torch.Tensor, torch.Tensor]],
    rule: LocalRule,
    ctx: LocalContext,
    settings: TrainSettings,
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    parts: Parts,
) -> float:
    """One client's local steps with the rule's hooks; the sum of the steps' losses."""
    optimizer = Sgd(
        model.parameters(),
        lr=settings.lr,
        momentum=settings.momentum,
        weight_decay=settings.weight_decay,
    )
    total_loss = 0.0
    for xb, yb in steps:
        optimizer.zero_grad()
        logits, features = parts(model, xb)
        loss = loss_fn(logits, yb)
        term = rule.loss_term(ctx, xb, yb, logits, features)
        if term is not None:
            loss = loss + term
        loss.backward()
        rule.before_step(ctx)
        optimizer.step()
        ctx.steps += 1
        rule.after_step(ctx)
        total_loss += float(loss.detach())
    return total_loss


def train_locally(
    model: nn.Module,
    x: np.ndarray | Streamed,
    y: np.ndarray,
    rule: LocalRule,
    settings: TrainSettings,
    *,
    seed: int,
    device: torch.device,
    received: RecordDict | None = None,
    state: ClientState | None = None,
    evaluate_on: tuple[np.ndarray, np.ndarray] | None = None,
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None,
    regression: bool = False,
    parts: Parts | None = None,
) -> TrainResult:
    """Train `model` in place on (x, y) and return what the reply needs; with `evaluate_on`,
    also the model's score there after the local steps (before the rule's `finish`, which
    may rescale a straggler's progress). `augment` transforms each training batch (CIFAR's
    crop and flip), drawing from the same seeded generator as the batches. `regression`: y
    holds numbers and the loss is the squared error of the model's one output.

    `parts` gives the logits and penultimate features of a batch (`forward_parts`; by default
    the model's `features`/`classifier` split when it has one, else its forward and none).
    """
    if len(x) == 0:
        raise ValueError("this client has no training data")
    start = time.perf_counter()
    parts = parts or forward_parts()
    seed_torch(seed)
    generator = torch.Generator().manual_seed(seed)
    _move(model, device).train()
    # in memory, moved to the device once; a large node's streamed records, per batch
    xs = torch.as_tensor(x).to(device) if isinstance(x, np.ndarray) else None
    ys = torch.as_tensor(y, dtype=torch.float32 if regression else torch.long).to(device)
    ctx = LocalContext(
        model=model,
        global_params=[p.detach().clone() for p in model.parameters()],
        device=device,
        lr=settings.lr,
        received=received if received is not None else RecordDict(),
        state=state,
        data=(x, y),
        seed=seed,
        parts=parts,
    )
    loss_fn = _squared_error if regression else nn.functional.cross_entropy
    rule.begin(ctx)
    order = batches(len(x), settings, generator)
    # augment draws from the generator between batches: reading ahead would reorder draws
    ahead = 1 if augment is not None else READ_AHEAD
    steps = _batches_of(x, xs, ys, order, device, ahead)
    if augment is not None:
        steps = ((augment(xb, generator), yb) for xb, yb in steps)
    cohort = joined()  # runtime.backend=vectorized: this client's chunk trains in lockstep
    if cohort is not None and not rule.steps_alone() and lockstep_problem(model) is None:
        job = Job(model, steps, settings.lr, settings.momentum, settings.weight_decay, loss_fn)
        cohort.train(job)
        ctx.steps, total_loss = job.steps, job.loss_sum
    else:
        leave_now()
        total_loss = _steps_alone(model, steps, rule, ctx, settings, loss_fn, parts)
    scored = None
    if evaluate_on is not None and len(evaluate_on[1]):
        scored = evaluate(model, *evaluate_on, device=device)
        _move(model, device).train()
    extras = rule.finish(ctx)
    _move(model, torch.device("cpu"))
    return TrainResult(
        num_examples=len(x),
        mean_loss=total_loss / max(ctx.steps, 1),
        steps=ctx.steps,
        seconds=time.perf_counter() - start,
        extras=extras,
        local_eval=scored,
    )

"""STEM's client (Khanduri et al., NeurIPS 2021, as TACO spec 2 recommends): local steps
along a variance-reduced momentum instead of the plain gradient.

A round starts from the server's model and momentum d (the average of the clients' last
momenta, `STEM_MOMENTUM`): the first step moves along d as received (along its own
gradient in the first round, when there is none). Every later step k draws a mini-batch xi_k
and moves along

    d_k = g(w_k; xi_k) + (1 - a)(d_{k-1} - g(w_{k-1}; xi_k))      (`stem_direction`)

which takes a second gradient, at the previous weights, on the same batch. After the last
step the client draws one more batch and replies with d_K at its end model, so the next
round's first step continues the sequence as the original algorithm's synchronisation does.
`a` is constant (0.2, TACO's setting). The server half is `server_app/strategies/stem.py`.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, RecordDict
from torch import nn
from torch.func import functional_call

from client_app.algorithms.base import LocalContext, LocalRule
from fl_system.algorithms.stem import STEM_MOMENTUM
from fl_system.learning.seeding import derive_seed

T = TypeVar("T")  # np.ndarray or torch.Tensor
_LAST_BATCH_SEED = 0x57E  # the batch of the reply's momentum, apart from the round's batches


class StemRule(LocalRule):
    """Steps along STEM's momentum; replies with the momentum at the end model."""

    def __init__(self, *, a: float = 0.2, batch_size: int = 32) -> None:
        if isinstance(a, bool) or not isinstance(a, int | float) or not 0 <= a <= 1:
            raise ValueError(f"algorithm.a must be a number in [0, 1], got {a!r}")
        self.a, self.batch_size = float(a), batch_size

    def begin(self, ctx: LocalContext) -> None:
        named = _trainable(ctx.model)
        received = ctx.received.array_records.get(STEM_MOMENTUM)
        start = None
        if received is not None:
            start = []
            for name, p in named:
                if name not in received or tuple(received[name].numpy().shape) != tuple(p.shape):
                    raise ValueError(f"stem: the server's momentum does not fit parameter '{name}'")
                start.append(
                    torch.as_tensor(received[name].numpy(), dtype=p.dtype, device=p.device)
                )
        ctx.extras["stem"] = {"direction": start, "previous": None, "batch": None}

    def loss_term(self, ctx, x, y, logits, features) -> torch.Tensor | None:
        ctx.extras["stem"]["batch"] = (x, y)  # the second gradient is taken on this batch
        return None

    def before_step(self, ctx: LocalContext) -> None:
        stem = ctx.extras["stem"]
        named = _trainable(ctx.model)
        grads = [p.grad.detach().clone() for _, p in named]
        if stem["previous"] is None:  # the round's first step: the received momentum
            direction = stem["direction"] if stem["direction"] is not None else grads
        else:
            before = _gradients(ctx.model, stem["previous"], *stem["batch"])
            direction = [
                stem_direction(g, gp, d, self.a)
                for g, gp, d in zip(grads, before, stem["direction"], strict=True)
            ]
        stem["direction"] = direction
        stem["previous"] = {name: p.detach().clone() for name, p in named}
        for (_, p), d in zip(named, direction, strict=True):
            p.grad.copy_(d)

    def finish(self, ctx: LocalContext) -> RecordDict:
        assert ctx.data is not None, "the trainer passes the local data"
        stem = ctx.extras["stem"]
        x, y = ctx.data
        rng = np.random.default_rng(derive_seed(ctx.seed, _LAST_BATCH_SEED))
        idx = rng.choice(len(y), size=min(self.batch_size, len(y)), replace=False)
        batch = (
            torch.as_tensor(x[idx], device=ctx.device),
            torch.as_tensor(y[idx], dtype=torch.long, device=ctx.device),
        )
        named = _trainable(ctx.model)
        now = _gradients(ctx.model, {name: p.detach() for name, p in named}, *batch)
        before = _gradients(ctx.model, stem["previous"], *batch)
        last = [
            stem_direction(g, gp, d, self.a)
            for g, gp, d in zip(now, before, stem["direction"], strict=True)
        ]
        record = ArrayRecord(
            {
                name: Array(d.detach().cpu().numpy())
                for (name, _), d in zip(named, last, strict=True)
            }
        )
        return RecordDict({STEM_MOMENTUM: record})


def _trainable(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def _gradients(
    model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> list[torch.Tensor]:
    """The data loss's gradient at `params` (the model's other parameters and buffers as
    they are) on one batch, without touching the model's weights or .grad."""
    leaves = {name: v.detach().requires_grad_(True) for name, v in params.items()}
    loss = nn.functional.cross_entropy(functional_call(model, leaves, (x,)), y)
    return list(torch.autograd.grad(loss, list(leaves.values())))


def stem_direction(grad: T, previous_grad: T, previous_direction: T, a: float) -> T:
    """d_k from g(w_k; xi_k), g(w_{k-1}; xi_k) and d_{k-1}: a variance-reduced momentum (both
    gradients on the same mini-batch), on numpy arrays and torch tensors alike."""
    return grad + (1.0 - a) * (previous_direction - previous_grad)

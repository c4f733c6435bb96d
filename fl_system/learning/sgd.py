"""Local SGD without torch.optim: the same arithmetic, none of its start-up.

`torch.optim.SGD`'s `step` and `zero_grad` are wrapped to keep TorchDynamo out; the first
call of either imports `torch._dynamo` (about a second of CPU, and sympy with it), which every
process that trains (a simulation worker, a ClientApp) paid before its first step or had to
import ahead. A local round needs plain SGD only: this is `torch.optim.SGD`'s single-tensor
update (what it runs for CPU tensors; dampening 0, no Nesterov, not maximising), step for
step the same numbers.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class Sgd:
    """Mini-batch SGD with momentum and weight decay, as `torch.optim.SGD` computes it.

    Parameters
    ----------
    params : Iterable[torch.Tensor]
        The tensors to update (a model's parameters); those without a gradient at a step
        are left alone.
    lr : float
        The learning rate.
    momentum : float (default: 0.0)
        The momentum factor (its buffer starts as the first gradient).
    weight_decay : float (default: 0.0)
        The L2 penalty added to each gradient.
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor],
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        self.params = list(params)
        self.lr, self.momentum, self.weight_decay = float(lr), float(momentum), weight_decay
        self.buffers: list[torch.Tensor | None] = [None] * len(self.params)

    def zero_grad(self) -> None:
        """Drop every gradient (`set_to_none=True`: the next backward writes fresh ones)."""
        for param in self.params:
            param.grad = None

    def step(self) -> None:
        """One update: p -= lr * (momentum buffer of (grad + weight_decay * p))."""
        with torch.no_grad():
            for i, param in enumerate(self.params):
                grad = param.grad
                if grad is None:
                    continue
                if self.weight_decay != 0:
                    grad = grad.add(param, alpha=self.weight_decay)
                if self.momentum != 0:
                    buffer = self.buffers[i]
                    if buffer is None:
                        buffer = self.buffers[i] = grad.detach().clone()
                    else:
                        buffer.mul_(self.momentum).add_(grad, alpha=1)  # dampening 0
                    grad = buffer
                param.add_(grad, alpha=-self.lr)

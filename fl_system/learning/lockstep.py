"""Many clients' copies of one model trained in lockstep: the arithmetic of
`runtime.backend=vectorized`.

Each client's parameters are a slice of stacked tensors (a leading client axis); one step
computes every active client's gradient of its own batch at once (the zoo's layered models
through `stacked_forward`, any other through `torch.func.vmap` over `grad` of a
`functional_call`) and applies `Sgd`'s update (momentum, weight decay) to each
client's slice, the same elementwise operations in the same order. A client whose batches
have run out is left out of later steps (masked), so clients of unequal partitions need no
padding of data. Models must be free of batch statistics and random layers (BatchNorm,
Dropout), as the project's are: a client's step then depends on its batch alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap

from fl_system.learning.stacked_forward import stacked_forward

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
UNSUPPORTED = (nn.modules.batchnorm._BatchNorm, nn.Dropout, nn.Dropout2d, nn.AlphaDropout)


def lockstep_problem(model: nn.Module) -> str | None:
    """Why `model` cannot train in lockstep (None: it can): a layer whose output depends on
    the other samples of its batch or on a random draw."""
    for name, module in model.named_modules():
        if isinstance(module, UNSUPPORTED):
            return f"its layer {name or type(module).__name__} ({type(module).__name__})"
    return None


class LockstepSgd:
    """Mini-batch SGD of `clients` copies of `model` at once, step for step as `Sgd` on each.

    Parameters
    ----------
    models : Sequence[nn.Module]
        One module per client, alike but for their values (each client's starting point);
        the first also runs every forward (`functional_call`), with the stacked values.
    lr, momentum, weight_decay : float
        `Sgd`'s settings, the same for every client.
    loss : Callable (default: cross-entropy)
        The mean loss of a batch's outputs against its targets.
    """

    def __init__(
        self,
        models: Sequence[nn.Module],
        *,
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        loss: Loss = nn.functional.cross_entropy,
    ) -> None:
        problem = lockstep_problem(models[0])
        if problem is not None:
            raise ValueError(f"the model cannot train in lockstep: {problem}")
        self.params, self.buffers = stack_module_state(list(models))
        self.params = {k: v.detach() for k, v in self.params.items()}
        self.lr, self.momentum, self.weight_decay = float(lr), float(momentum), weight_decay
        # momentum buffers, stacked; zeros then 0 * momentum + gradient is the gradient,
        # bit for bit, as Sgd's first buffer
        self.velocity = {k: torch.zeros_like(v) for k, v in self.params.items()}
        self.clients = len(models)
        base = models[0]

        def batch_loss(
            params: Mapping[str, torch.Tensor],
            buffers: Mapping[str, torch.Tensor],
            x: torch.Tensor,
            y: torch.Tensor,
        ) -> torch.Tensor:
            return loss(functional_call(base, (params, buffers), (x,)), y)

        self._grads = vmap(grad_and_value(batch_loss))
        self._forward = stacked_forward(base)  # the zoo's layered models: no vmap
        self._losses = vmap(loss)

    def step(self, x: torch.Tensor, y: torch.Tensor, active: torch.Tensor | None = None):
        """One step of the clients `active` (indices, ascending; None: all), client i on
        batch (x[i], y[i]) of the same size for all; returns their losses (before the step)."""
        everyone = active is None or len(active) == self.clients
        params = self.params if everyone else {k: v[active] for k, v in self.params.items()}
        buffers = self.buffers if everyone else {k: v[active] for k, v in self.buffers.items()}
        if self._forward is None:
            grads, losses = self._grads(params, buffers, x, y)
        else:
            grads, losses = self._stacked_grads(params, x, y)
        with torch.no_grad():
            for name, param in params.items():
                update = grads[name]
                if self.weight_decay != 0:
                    update = update.add(param, alpha=self.weight_decay)
                if self.momentum != 0:  # a buffer of zeros: its first step makes it the gradient
                    stacked = self.velocity[name]
                    velocity = stacked if everyone else stacked[active]
                    update = velocity.mul(self.momentum).add_(update, alpha=1)
                    if everyone:
                        self.velocity[name] = update
                    else:
                        stacked[active] = update
                stepped = param.add(update, alpha=-self.lr)
                if everyone:
                    self.params[name] = stepped
                else:
                    self.params[name][active] = stepped
        return losses.detach()

    def _stacked_grads(
        self, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """Each client's gradient of its own loss: the gradient of their sum (no client's
        loss depends on another's parameters)."""
        leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
        assert self._forward is not None
        with torch.enable_grad():
            losses = self._losses(self._forward(leaves, x), y)
            grads = torch.autograd.grad(losses.sum(), list(leaves.values()))
        return dict(zip(leaves, grads, strict=True)), losses

    def client_state(self, i: int) -> dict[str, torch.Tensor]:
        """Client `i`'s parameters and buffers, by the model's names (a state dict)."""
        return {k: v[i].clone() for k, v in {**self.params, **self.buffers}.items()}

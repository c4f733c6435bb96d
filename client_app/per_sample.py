"""Moments of exact per-sample gradients of the data loss.

FedGSNR takes their mean and variance at the received global model; EFL takes the mean of
their squares (the empirical Fisher diagonal) at the client's end model. Eval mode (running
BatchNorm statistics, no dropout), data loss only: no weight decay, proximal term, control
variate or elastic penalty. Trainable parameters only, flattened in `named_parameters()` order.

Two exact ways, equal up to float32 rounding: models made of nn.Linear and nn.Conv2d layers
get the sums from one batched backward pass (`client_app.layer_gradients`; for the small CNN
the time against vmap is in benchmarks/gsnr_overhead/report.md); any other model gets `torch.func`'s
vmap of grad.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from client_app.layer_gradients import Sums, layer_gradient_sums, supported_layers

CHUNK_BYTES = 256 * 2**20  # per-sample gradients held at once (chunk x d float32 values)


def gradient_moments(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    samples: int,
    seed: int,
    chunk_size: int | None = None,
    device: torch.device | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """(mean, mean of squares, s) in float64 over s = min(samples, len(x)) per-sample gradients
    of examples drawn without replacement with `seed`.

    Gradients are taken `chunk_size` samples at a time (default: as many as fit in
    CHUNK_BYTES, all 64 for a small CNN), each chunk reduced per parameter to its float32 sum
    and sum of squares before the float64 accumulation, so memory stays at chunk_size x d
    floats whatever `samples` is.
    """
    d = sum(p.numel() for p in model.parameters() if p.requires_grad)
    chunk_size = chunk_size or max(1, CHUNK_BYTES // (4 * max(d, 1)))
    if samples < 1 or chunk_size < 1:
        raise ValueError(f"samples and chunk_size must be >= 1, got {samples}, {chunk_size}")
    if len(x) == 0:
        raise ValueError("this client has no training data")
    device = device or torch.device("cpu")
    s = min(samples, len(x))
    generator = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(x), generator=generator)[:s]
    xs = torch.as_tensor(x[idx.numpy()]).to(device)  # a streamed node reads s rows
    ys = torch.as_tensor(y, dtype=torch.long)[idx].to(device)

    was_training = model.training
    model.to(device).eval()
    params = {k: p.detach() for k, p in model.named_parameters() if p.requires_grad}
    total = {k: torch.zeros(p.shape, dtype=torch.float64, device=device) for k, p in params.items()}
    total_sq = {k: torch.zeros_like(v) for k, v in total.items()}
    layers = supported_layers(model)
    try:
        for start in range(0, s, chunk_size):
            xc, yc = xs[start : start + chunk_size], ys[start : start + chunk_size]
            sums = None if layers is None else layer_gradient_sums(model, layers, xc, yc)
            if sums is None:
                layers = None  # not this model: vmap for the remaining chunks too
                sums = vmap_gradient_sums(model, params, xc, yc)
            for k, (g_sum, g_sq) in sums.items():  # a chunk's sums in float32 (casting costs)
                total[k] += g_sum.double()
                total_sq[k] += g_sq.double()
    finally:
        model.train(was_training)
    mean = torch.cat([v.reshape(-1) for v in total.values()]).cpu() / s
    second = torch.cat([v.reshape(-1) for v in total_sq.values()]).cpu() / s
    return mean.numpy(), second.numpy(), s


def vmap_gradient_sums(
    model: nn.Module, params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor
) -> Sums:
    """Per parameter in `params`, the float32 sum and sum of squares over the samples of x of
    each sample's cross-entropy gradient, from `torch.func` (any model; x.shape[0] x d floats)."""
    buffers = dict(model.named_buffers())

    def loss(p: dict[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, (p, buffers), (xb[None],))
        return nn.functional.cross_entropy(logits, yb[None])

    grads = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)
    return {k: (g.sum(dim=0), (g * g).sum(dim=0)) for k, g in grads.items()}

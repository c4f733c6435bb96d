"""FedGSNR, client half: gradient statistics at the received global model.

Before any local step the client draws `samples` examples without replacement (all of them
when it holds fewer), takes exact per-sample gradients of the data loss with `torch.func`
(vmap of grad) in eval mode, and returns their mean m_k and biased diagonal variance v_k,
flattened over the trainable parameters in `named_parameters()` order (spec 1.2, 1.10).
The server turns them into this client's number of local steps (`fl_system.gsnr`).
An add-on (`algorithm.gsnr.client`): local training stays the base algorithm's.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from torch import nn
from torch.func import functional_call, grad, vmap

from client_app.addons import ClientHooks, LocalData
from fl_system import protocol


class GsnrStatistics(ClientHooks):
    """Answers the server's `gsnr-stats` query with m_k and v_k (float32 on the wire)."""

    question = protocol.GSNR_STATS

    def __init__(self, *, samples: int = 64) -> None:
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
            raise ValueError(f"algorithm.gsnr.samples must be an integer >= 1, got {samples!r}")
        self.samples = samples

    def answer(
        self,
        model: nn.Module,
        data: LocalData,
        received: RecordDict,
        *,
        seed: int,
        device: torch.device,
    ) -> RecordDict:
        mean, variance, used = gradient_statistics(
            model, *data, samples=self.samples, seed=seed, device=device
        )
        stats = ArrayRecord(
            {
                protocol.GSNR_MEAN: Array(mean.astype(np.float32)),
                protocol.GSNR_VARIANCE: Array(variance.astype(np.float32)),
            }
        )
        return RecordDict(
            {
                protocol.GSNR_STATS: stats,
                protocol.METRICS: MetricRecord({protocol.GSNR_SAMPLES: used}),
            }
        )


def gradient_statistics(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    samples: int,
    seed: int,
    chunk_size: int = 16,
    device: torch.device | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """(m_k, v_k, s): mean and variance (float64) of s = min(samples, len(x)) per-sample gradients.

    Eval mode (running BatchNorm statistics, no dropout), data loss only: no weight decay,
    proximal term or control variate. Gradients are taken `chunk_size` samples at a time, so
    memory stays at chunk_size x d floats whatever `samples` is.
    """
    if samples < 1 or chunk_size < 1:
        raise ValueError(f"gsnr samples and chunk_size must be >= 1, got {samples}, {chunk_size}")
    if len(x) == 0:
        raise ValueError("this client has no training data")
    device = device or torch.device("cpu")
    s = min(samples, len(x))
    generator = torch.Generator().manual_seed(seed)
    idx = torch.randperm(len(x), generator=generator)[:s]
    xs = torch.as_tensor(x)[idx].to(device)
    ys = torch.as_tensor(y, dtype=torch.long)[idx].to(device)

    params = {k: p.detach() for k, p in model.named_parameters() if p.requires_grad}
    buffers = dict(model.named_buffers())

    def loss(p: dict[str, torch.Tensor], xb: torch.Tensor, yb: torch.Tensor) -> torch.Tensor:
        logits = functional_call(model, (p, buffers), (xb[None],))
        return nn.functional.cross_entropy(logits, yb[None])

    per_sample_grad = vmap(grad(loss), in_dims=(None, 0, 0))
    total = torch.zeros(sum(p.numel() for p in params.values()), dtype=torch.float64)
    total_sq = torch.zeros_like(total)
    was_training = model.training
    model.to(device).eval()
    try:
        for start in range(0, s, chunk_size):
            grads = per_sample_grad(
                params, xs[start : start + chunk_size], ys[start : start + chunk_size]
            )
            flat = torch.cat([g.reshape(g.shape[0], -1) for g in grads.values()], dim=1)
            flat = flat.double().cpu()
            total += flat.sum(dim=0)
            total_sq += (flat**2).sum(dim=0)
    finally:
        model.train(was_training)
    mean = total / s
    variance = (total_sq / s - mean**2).clamp_(min=0.0)
    return mean.numpy(), variance.numpy(), s

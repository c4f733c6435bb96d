"""The GSNR step schedule (FedGSNR), the add-on's client half: gradient statistics at the
received global model.

Before any local step the client draws `samples` examples without replacement (all of them
when it holds fewer), takes exact per-sample gradients of the data loss in eval mode
(`client_app.per_sample`: one batched backward pass for Linear/Conv2d models, else
torch.func's vmap of grad), and returns their mean m_k and biased diagonal variance v_k,
flattened over the trainable parameters in `named_parameters()` order (spec 1.2, 1.10).
The server turns them into this client's number of local steps (`fl_system.addons.gsnr`).
An add-on (`algorithm.gsnr.client`): local training stays the base algorithm's.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, MetricRecord, RecordDict
from torch import nn

from client_app.addons import ClientHooks, LocalData
from client_app.per_sample import gradient_moments
from fl_system.addons import check_settings
from fl_system.addons.gsnr import GSNR_MEAN, GSNR_SAMPLES, GSNR_STATS, GSNR_VARIANCE
from fl_system.messages import protocol


class GsnrStatistics(ClientHooks):
    """Answers the server's `gsnr-stats` query with m_k and v_k (float32 on the wire)."""

    question = GSNR_STATS

    def __init__(self, *, samples: int = 64) -> None:
        check_settings("gsnr", {"samples": samples})
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
                GSNR_MEAN: Array(mean.astype(np.float32)),
                GSNR_VARIANCE: Array(variance.astype(np.float32)),
            }
        )
        return RecordDict(
            {
                GSNR_STATS: stats,
                protocol.METRICS: MetricRecord({GSNR_SAMPLES: used}),
            }
        )


def gradient_statistics(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    samples: int,
    seed: int,
    chunk_size: int | None = None,
    device: torch.device | None = None,
) -> tuple[np.ndarray, np.ndarray, int]:
    """(m_k, v_k, s): mean and biased variance (float64) of s = min(samples, len(x))
    per-sample gradients (`client_app.per_sample.gradient_moments`)."""
    mean, second, s = gradient_moments(
        model, x, y, samples=samples, seed=seed, chunk_size=chunk_size, device=device
    )
    return mean, np.maximum(second - mean**2, 0.0), s

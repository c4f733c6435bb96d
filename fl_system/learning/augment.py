"""Training-batch augmentation (FedDisco spec's CIFAR preprocessing): RandomCrop(pad 4) and a
horizontal flip, on batches of images that are already normalised.

torchvision pads the picture with black before it normalises; here the batch is normalised,
so the padding is black as normalised, (0 - mean) / std per channel (`fill`). Draws come from
the trainer's seeded generator, so a client's batches are the same in every runtime.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class CropFlip:
    """Each image padded by `padding` on every side, cropped back to its size at a random
    offset, and (with `flip`) mirrored left-right with probability 1/2."""

    def __init__(self, *, padding: int = 4, flip: bool = True, fill: Sequence[float]) -> None:
        if isinstance(padding, bool) or not isinstance(padding, int) or padding < 0:
            raise ValueError(f"dataset.augment.padding must be an integer >= 0, got {padding!r}")
        self.padding, self.flip, self.fill = padding, bool(flip), [float(v) for v in fill]

    def __call__(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        n, channels, height, width = x.shape
        if len(self.fill) != channels:
            raise ValueError(f"augment fill has {len(self.fill)} values for {channels} channels")
        p = self.padding
        padded = torch.empty((n, channels, height + 2 * p, width + 2 * p), dtype=x.dtype)
        padded = padded.to(x.device)
        padded[:] = torch.tensor(self.fill, dtype=x.dtype, device=x.device).view(1, -1, 1, 1)
        padded[:, :, p : p + height, p : p + width] = x
        top = torch.randint(0, 2 * p + 1, (n,), generator=generator).to(x.device)
        left = torch.randint(0, 2 * p + 1, (n,), generator=generator).to(x.device)
        rows = (top[:, None] + torch.arange(height, device=x.device))[:, None, :, None]
        cols = (left[:, None] + torch.arange(width, device=x.device))[:, None, None, :]
        images = torch.arange(n, device=x.device)[:, None, None, None]
        out = padded[
            images, torch.arange(channels, device=x.device)[None, :, None, None], rows, cols
        ]
        if self.flip:
            mirrored = (torch.rand(n, generator=generator) < 0.5).to(x.device)
            out[mirrored] = out[mirrored].flip(-1)
        return out

"""Model zoo of the papers, split into a feature extractor and a linear classifier.

Every model is built by Hydra with keyword-only ``input_shape`` and ``num_classes`` and
exposes ``features`` (input -> flat penultimate vector), ``classifier`` (the last
``nn.Linear``) and ``feature_dim``, because local rules such as MOON need the penultimate
features. Initialisation is PyTorch's default; callers seed torch before building.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["MLP", "VGG11", "FeatureClassifier", "ResNet18GN", "SimpleCNN"]


def _as_shape(input_shape: Sequence[int]) -> tuple[int, ...]:
    """Normalise list/tuple/ListConfig shapes to a tuple of ints."""
    shape = tuple(int(v) for v in input_shape)
    if not shape or any(v <= 0 for v in shape):
        raise ValueError(f"input_shape must be non-empty and positive; got {shape}")
    return shape


def _image_shape(input_shape: Sequence[int], model: str) -> tuple[int, int, int]:
    """Return (C, H, W), or explain why the model cannot take this input."""
    shape = _as_shape(input_shape)
    if len(shape) != 3:
        raise ValueError(
            f"model '{model}' needs image input shaped [C, H, W]; got {list(shape)} "
            "(vector data needs model=mlp)"
        )
    return shape[0], shape[1], shape[2]


class FeatureClassifier(nn.Module):
    """Base: ``forward(x) = classifier(features(x))``."""

    features: nn.Module
    classifier: nn.Linear
    feature_dim: int

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


class MLP(FeatureClassifier):
    """Fully connected net for vectors (or flattened images)."""

    def __init__(
        self,
        *,
        input_shape: Sequence[int],
        num_classes: int,
        hidden: Sequence[int] = (200, 200),
    ) -> None:
        super().__init__()
        width = math.prod(_as_shape(input_shape))
        layers: list[nn.Module] = [nn.Flatten()]
        for size in (int(h) for h in hidden):
            layers += [nn.Linear(width, size), nn.ReLU()]
            width = size
        self.features = nn.Sequential(*layers)
        self.feature_dim = width
        self.classifier = nn.Linear(width, int(num_classes))


def _conv_pool_size(size: int) -> int:
    """Spatial size after conv5x5 (no padding) then maxpool2; <= 0 means it does not fit."""
    return (size - 4) // 2


class SimpleCNN(FeatureClassifier):
    """The papers' LeNet-style "simple CNN" (62,006 params on 3x32x32, 10 classes)."""

    def __init__(self, *, input_shape: Sequence[int], num_classes: int) -> None:
        super().__init__()
        channels, height, width = _image_shape(input_shape, "cnn")
        out_h = _conv_pool_size(_conv_pool_size(height))
        out_w = _conv_pool_size(_conv_pool_size(width))
        # Valid sizes are those where both conv5x5+pool stages leave >= 1 pixel: 16x16.
        if out_h < 1 or out_w < 1:
            raise ValueError(
                f"model 'cnn' needs images of at least 16x16; got {height}x{width} — use model=mlp"
            )
        self.features = nn.Sequential(
            nn.Conv2d(channels, 6, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(6, 16, kernel_size=5),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(16 * out_h * out_w, 120),
            nn.ReLU(),
            nn.Linear(120, 84),
            nn.ReLU(),
        )
        self.feature_dim = 84
        self.classifier = nn.Linear(84, int(num_classes))


class _BasicBlockGN(nn.Module):
    """ResNet basic block with GroupNorm, which (unlike BatchNorm) has no running stats."""

    def __init__(self, in_planes: int, planes: int, stride: int, groups: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, planes)
        self.relu = nn.ReLU()
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=stride, bias=False),
                nn.GroupNorm(groups, planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.norm1(self.conv1(x)))
        out = self.norm2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class ResNet18GN(FeatureClassifier):
    """CIFAR-style ResNet-18: 3x3 stride-1 stem, no max-pool, GroupNorm (FedDisco's code)."""

    def __init__(self, *, input_shape: Sequence[int], num_classes: int, groups: int = 2) -> None:
        super().__init__()
        channels, _, _ = _image_shape(input_shape, "resnet18")
        groups = int(groups)
        if groups < 1 or 64 % groups:
            raise ValueError(f"groups must divide 64; got {groups}")
        layers: list[nn.Module] = [
            nn.Conv2d(channels, 64, 3, stride=1, padding=1, bias=False),
            nn.GroupNorm(groups, 64),
            nn.ReLU(),
        ]
        in_planes = 64
        for planes, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers.append(_BasicBlockGN(in_planes, planes, stride, groups))
            layers.append(_BasicBlockGN(planes, planes, 1, groups))
            in_planes = planes
        layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
        self.features = nn.Sequential(*layers)
        self.feature_dim = 512
        self.classifier = nn.Linear(512, int(num_classes))


_VGG11_CONFIG: tuple[int | str, ...] = (
    64,
    "M",
    128,
    "M",
    256,
    256,
    "M",
    512,
    512,
    "M",
    512,
    512,
    "M",
)


class VGG11(FeatureClassifier):
    """EFL's "simplified" VGG-11: no BatchNorm, pooled to 1x1, two 512-wide hidden FCs."""

    def __init__(self, *, input_shape: Sequence[int], num_classes: int) -> None:
        super().__init__()
        channels, _, _ = _image_shape(input_shape, "vgg11")
        layers: list[nn.Module] = []
        for item in _VGG11_CONFIG:
            if item == "M":
                # ceil_mode keeps five pools valid on 28x28 (28-14-7-4-2-1); same as floor on 32x32.
                layers.append(nn.MaxPool2d(2, ceil_mode=True))
            else:
                layers += [nn.Conv2d(channels, int(item), 3, padding=1), nn.ReLU()]
                channels = int(item)
        layers += [
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(512, 512),
            nn.ReLU(),
            nn.Linear(512, 512),
            nn.ReLU(),
        ]
        self.features = nn.Sequential(*layers)
        self.feature_dim = 512
        self.classifier = nn.Linear(512, int(num_classes))

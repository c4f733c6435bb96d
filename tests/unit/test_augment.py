"""CIFAR's training augmentation: crop from a padded image and a horizontal flip, seeded."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir

from fl_system.cli import CONF_DIR
from fl_system.data.sources import CIFAR10_MEAN, CIFAR10_STD, CIFAR100_MEAN, CIFAR100_STD
from fl_system.learning.augment import CropFlip


def _images(n: int = 5) -> torch.Tensor:
    return torch.arange(n * 2 * 3 * 4, dtype=torch.float32).reshape(n, 2, 3, 4)


def test_each_image_is_its_padded_self_cropped_at_the_drawn_offset() -> None:
    x = _images()
    out = CropFlip(padding=2, flip=False, fill=[-1.0, -2.0])(x, torch.Generator().manual_seed(7))
    draws = torch.Generator().manual_seed(7)
    top = torch.randint(0, 5, (5,), generator=draws)
    left = torch.randint(0, 5, (5,), generator=draws)
    padded = np.empty((5, 2, 7, 8), np.float32)
    padded[:, 0], padded[:, 1] = -1.0, -2.0  # the border is the fill, per channel
    padded[:, :, 2:5, 2:6] = x.numpy()
    for i in range(5):
        t, left_i = int(top[i]), int(left[i])
        np.testing.assert_array_equal(out[i].numpy(), padded[i, :, t : t + 3, left_i : left_i + 4])
    assert len({(int(t), int(left_i)) for t, left_i in zip(top, left, strict=True)}) > 1


def test_a_flip_mirrors_about_half_the_images_and_nothing_else() -> None:
    x = torch.randn(400, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    out = CropFlip(padding=0, flip=True, fill=[0.0] * 3)(x, torch.Generator().manual_seed(1))
    same = [bool(torch.equal(o, i)) for o, i in zip(out, x, strict=True)]
    mirrored = [bool(torch.equal(o, i.flip(-1))) for o, i in zip(out, x, strict=True)]
    assert all(s != m for s, m in zip(same, mirrored, strict=True))
    assert 160 < sum(mirrored) < 240


def test_no_padding_and_no_flip_is_the_identity_and_the_seed_decides() -> None:
    x = _images()
    assert torch.equal(CropFlip(padding=0, flip=False, fill=[0, 0])(x, torch.Generator()), x)
    a = CropFlip(fill=[0, 0])(x, torch.Generator().manual_seed(3))
    b = CropFlip(fill=[0, 0])(x, torch.Generator().manual_seed(3))
    assert torch.equal(a, b)


@pytest.mark.parametrize(
    ("name", "mean", "std"),
    [("cifar10", CIFAR10_MEAN, CIFAR10_STD), ("cifar100", CIFAR100_MEAN, CIFAR100_STD)],
)
def test_cifar_configs_pad_with_black_as_normalised(name: str, mean, std) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=[f"dataset={name}"])
    augment = cfg.dataset.augment
    assert (augment.padding, augment.flip) == (4, True)
    np.testing.assert_allclose(
        list(augment.fill), [-m / s for m, s in zip(mean, std, strict=True)], atol=1e-6
    )


def test_a_bad_padding_is_named() -> None:
    with pytest.raises(ValueError, match=r"dataset\.augment\.padding must be an integer >= 0"):
        CropFlip(padding=-1, fill=[0.0])

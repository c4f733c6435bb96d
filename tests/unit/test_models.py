"""Model shapes and parameter counts match the papers' architectures."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf
from torch import nn

from fl_system.learning.models import MLP, VGG11, ResNet18GN, SimpleCNN


def _num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize(
    ("shape", "classes", "expected"),
    [
        ((3, 32, 32), 10, 62_006),  # FedGSNR / FedDisco CIFAR LeNet
        ((1, 28, 28), 10, 44_426),  # FMNIST variant, FC 256->120
        ((1, 28, 28), 62, 48_846),  # FEMNIST count quoted in the TACO spec
    ],
)
def test_simple_cnn_parameter_counts(shape: tuple[int, ...], classes: int, expected: int) -> None:
    assert _num_params(SimpleCNN(input_shape=shape, num_classes=classes)) == expected


def test_simple_cnn_layer_widths() -> None:
    model = SimpleCNN(input_shape=[3, 32, 32], num_classes=10)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(400, 120), (120, 84), (84, 10)]
    assert model.classifier is linears[-1]


def test_other_parameter_counts() -> None:
    assert _num_params(MLP(input_shape=[60], num_classes=10)) == 54_410  # 60-200-200-10
    assert _num_params(ResNet18GN(input_shape=[3, 32, 32], num_classes=10)) == 11_173_962
    assert _num_params(VGG11(input_shape=[3, 32, 32], num_classes=100)) == 9_797_092


def test_resnet_uses_groupnorm_only() -> None:
    model = ResNet18GN(input_shape=[3, 32, 32], num_classes=10, groups=2)
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert len(norms) == 20  # stem + 16 in blocks + 3 downsample shortcuts
    assert all(m.num_groups == 2 for m in norms)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert not any(isinstance(m, nn.MaxPool2d) for m in model.modules())
    first_conv = next(m for m in model.modules() if isinstance(m, nn.Conv2d))
    assert (first_conv.kernel_size, first_conv.stride) == ((3, 3), (1, 1))


def test_vgg_has_no_batchnorm() -> None:
    model = VGG11(input_shape=[3, 32, 32], num_classes=10)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    assert sum(isinstance(m, nn.Conv2d) for m in model.modules()) == 8


@pytest.mark.parametrize(
    ("factory", "shape", "feature_dim"),
    [
        (lambda s: MLP(input_shape=s, num_classes=7), (60,), 200),
        (lambda s: MLP(input_shape=s, num_classes=7), (1, 8, 8), 200),
        (lambda s: SimpleCNN(input_shape=s, num_classes=7), (3, 32, 32), 84),
        (lambda s: SimpleCNN(input_shape=s, num_classes=7), (1, 28, 28), 84),
        (lambda s: ResNet18GN(input_shape=s, num_classes=7), (3, 32, 32), 512),
        (lambda s: VGG11(input_shape=s, num_classes=7), (3, 32, 32), 512),
        (lambda s: VGG11(input_shape=s, num_classes=7), (1, 28, 28), 512),
    ],
)
def test_output_and_feature_shapes(factory, shape: tuple[int, ...], feature_dim: int) -> None:
    torch.manual_seed(0)
    model = factory(shape)
    x = torch.randn(2, *shape)
    with torch.no_grad():
        feats = model.features(x)
        out = model(x)
    assert model.feature_dim == feature_dim
    assert feats.shape == (2, feature_dim)
    assert out.shape == (2, 7)
    assert torch.equal(out, model.classifier(feats))


def test_mlp_custom_hidden_and_empty_hidden() -> None:
    model = MLP(input_shape=[1, 8, 8], num_classes=10, hidden=[32])
    assert model.feature_dim == 32
    assert _num_params(model) == 64 * 32 + 32 + 32 * 10 + 10
    logistic = MLP(input_shape=[5], num_classes=3, hidden=())
    assert logistic.feature_dim == 5
    assert _num_params(logistic) == 5 * 3 + 3


def test_simple_cnn_rejects_small_images() -> None:
    with pytest.raises(ValueError, match=r"at least 16x16; got 8x8 .*model=mlp"):
        SimpleCNN(input_shape=[1, 8, 8], num_classes=10)
    SimpleCNN(input_shape=[1, 16, 16], num_classes=10)  # smallest size that fits


@pytest.mark.parametrize("model_cls", [SimpleCNN, ResNet18GN, VGG11])
def test_image_models_reject_vectors(model_cls: type[nn.Module]) -> None:
    with pytest.raises(ValueError, match=r"\[C, H, W\]; got \[60\]"):
        model_cls(input_shape=[60], num_classes=10)


def test_accepts_listconfig_from_hydra() -> None:
    cfg = OmegaConf.create({"input_shape": [3, 32, 32], "num_classes": 10, "hidden": [16]})
    cnn = SimpleCNN(input_shape=cfg.input_shape, num_classes=cfg.num_classes)
    assert _num_params(cnn) == 62_006
    mlp = MLP(input_shape=cfg.input_shape, num_classes=cfg.num_classes, hidden=cfg.hidden)
    assert mlp.feature_dim == 16
    assert mlp(torch.zeros(2, 3, 32, 32)).shape == (2, 10)

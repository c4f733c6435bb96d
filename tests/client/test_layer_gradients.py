"""Per-sample gradient sums from one batched backward pass equal torch.func's vmap of grad, and
FedGSNR's n_opt and GSNR computed from them equal those of the vmap statistics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from torch import nn

from client_app.layer_gradients import layer_gradient_sums, supported_layers
from client_app.per_sample import gradient_moments, vmap_gradient_sums
from fl_system.addons import gsnr
from fl_system.cli import CONF_DIR
from fl_system.data.configured import load_dataset, partition_indices
from fl_system.learning.own_model import build_model

SAMPLES = 64  # the spec's s
BATCH = 64  # the spec's B in the descriptor


def _params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.detach() for k, p in model.named_parameters() if p.requires_grad}


def _assert_same_sums(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> None:
    layers = supported_layers(model)
    assert layers is not None
    fast = layer_gradient_sums(model, layers, x, y)
    reference = vmap_gradient_sums(model, _params(model), x, y)
    assert fast is not None and list(fast) == list(reference)
    for name, (g_sum, g_sq) in reference.items():
        torch.testing.assert_close(fast[name][0], g_sum, rtol=1e-5, atol=1e-7)
        torch.testing.assert_close(fast[name][1], g_sq, rtol=1e-5, atol=1e-9)


def test_strided_dilated_padded_convolutions_and_in_place_relus() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, stride=2, padding=1),
        nn.ReLU(inplace=True),  # changes the first convolution's output after the hook saw it
        nn.Conv2d(4, 5, (3, 2), stride=(1, 2), padding=(2, 0), dilation=2, bias=False),
        nn.ReLU(inplace=True),
        nn.Flatten(),
        nn.Linear(5 * 6 * 3, 7),
        nn.ReLU(),
        nn.Linear(7, 3),
    ).eval()
    x, y = torch.randn(9, 3, 11, 13), torch.randint(0, 3, (9,))
    _assert_same_sums(model, x, y)


def test_frozen_layers_are_left_out_and_a_callers_no_grad_does_not_apply() -> None:
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 3)).eval()
    model[0].weight.requires_grad_(False)
    x, y = torch.randn(12, 4), torch.randint(0, 3, (12,))
    with torch.no_grad():
        _assert_same_sums(model, x, y)
    assert list(layer_gradient_sums(model, supported_layers(model), x, y)) == [
        "0.bias",
        "2.weight",
        "2.bias",
    ]


class _Twice(nn.Module):
    """One layer applied twice: its per-sample gradient is not one outer product."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(torch.relu(self.layer(x)))


def test_models_it_cannot_do_exactly_are_left_to_vmap() -> None:
    tied = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 3))
    tied[1].weight = tied[0].weight
    assert supported_layers(tied) is None
    assert supported_layers(nn.Sequential(nn.Conv2d(1, 2, 3), nn.GroupNorm(1, 2))) is None
    assert supported_layers(nn.Conv2d(2, 2, 3, groups=2)) is None
    assert supported_layers(nn.Conv2d(2, 2, 3, padding="same")) is None
    twice = _Twice()
    x, y = torch.randn(5, 3), torch.randint(0, 3, (5,))
    assert layer_gradient_sums(twice, supported_layers(twice), x, y) is None
    mean, second, _ = gradient_moments(twice, x.numpy(), y.numpy(), samples=5, seed=0)
    g_sum, g_sq = vmap_gradient_sums(twice, _params(twice), x, y)["layer.weight"]
    np.testing.assert_allclose(mean[:9], g_sum.reshape(-1).double().numpy() / 5, rtol=1e-6)
    np.testing.assert_allclose(second[:9], g_sq.reshape(-1).double().numpy() / 5, rtol=1e-6)


def _statistics(sums: dict[str, tuple[torch.Tensor, torch.Tensor]], s: int) -> tuple:
    """(m_k, v_k) in float64 from per-parameter sums, as `gradient_statistics` forms them."""
    total = torch.cat([g.reshape(-1) for g, _ in sums.values()]).double().numpy()
    total_sq = torch.cat([q.reshape(-1) for _, q in sums.values()]).double().numpy()
    mean = total / s
    return mean, np.maximum(total_sq / s - mean**2, 0.0)


def test_n_opt_and_gsnr_of_the_cnn_on_mnist_equal_those_of_the_vmap_statistics() -> None:
    """Five Dirichlet(0.5) clients of mnist5k, the paper's simple CNN, s = B = 64: the spec
    asks n_opt to 4 decimals (its minimal unit tests); they agree to float32 rounding."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(
            "config",
            overrides=["dataset=mnist5k", "model=cnn", "partition=dirichlet", "num_clients=5"],
        )
    data = load_dataset(cfg)
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    layers = supported_layers(model)
    assert layers is not None and len(layers) == 5  # two convolutions, three linear layers
    fast, reference, sizes = [], [], []
    for idx in partition_indices(cfg, 5):
        x = torch.as_tensor(data.x_train[idx[:SAMPLES]])
        y = torch.as_tensor(data.y_train[idx[:SAMPLES]], dtype=torch.long)
        fast.append(_statistics(layer_gradient_sums(model, layers, x, y), len(y)))
        reference.append(_statistics(vmap_gradient_sums(model, _params(model), x, y), len(y)))
        sizes.append(len(idx))
    terms = []
    for stats in (fast, reference):
        means, variances = np.stack([m for m, _ in stats]), np.stack([v for _, v in stats])
        m_g, v_g = gsnr.global_statistics(means, variances, sizes)
        terms.append(gsnr.client_terms(means, variances, m_g, v_g, BATCH))
    assert np.all(terms[1].n_opt > 0)
    np.testing.assert_allclose(terms[0].n_opt, terms[1].n_opt, rtol=1e-6)
    np.testing.assert_allclose(terms[0].gsnr, terms[1].gsnr, rtol=1e-5)
    assert np.round(terms[0].n_opt, 4) == pytest.approx(np.round(terms[1].n_opt, 4))

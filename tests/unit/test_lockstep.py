"""Clients trained in lockstep end where each, trained alone by `Sgd` on the same batches,
ends: unequal partitions (a client out of batches stops stepping), momentum, weight decay."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from fl_system.learning.lockstep import LockstepSgd, lockstep_problem
from fl_system.learning.models import MLP, SimpleCNN
from fl_system.learning.sgd import Sgd
from fl_system.learning.stacked_forward import stacked_forward


def _alone(model: nn.Module, batches, **settings) -> list[float]:
    """`model` trained by Sgd on its batches, as the process backend trains a client."""
    optimizer = Sgd(model.parameters(), **settings)
    losses = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses


def _data(clients: list[int], shape: tuple[int, ...], batch: int, seed: int):
    """Each client's batches (its partition of `n` examples, in batches of `batch`, the last
    one smaller), as lists of (x, y)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in clients:
        x, y = torch.randn((n, *shape), generator=g), torch.randint(0, 10, (n,), generator=g)
        out.append([(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)])
    return out


def _lockstep(models: list[nn.Module], data, **settings) -> tuple[LockstepSgd, list[list]]:
    """Every client's t-th batch at step t, grouped by batch size among the active ones."""
    trainer = LockstepSgd(models, **settings)
    losses: list[list[float]] = [[] for _ in models]
    for t in range(max(len(d) for d in data)):
        active = [i for i, d in enumerate(data) if t < len(d)]
        for size in sorted({len(data[i][t][1]) for i in active}):
            group = [i for i in active if len(data[i][t][1]) == size]
            x = torch.stack([data[i][t][0] for i in group])
            y = torch.stack([data[i][t][1] for i in group])
            index = None if len(group) == len(models) else torch.tensor(group)
            for i, loss in zip(group, trainer.step(x, y, index).tolist(), strict=True):
                losses[i].append(loss)
    return trainer, losses


@pytest.mark.parametrize(
    ("make", "shape", "settings"),
    [
        (lambda: MLP(input_shape=[64], num_classes=10, hidden=[32]), (64,), {"lr": 0.1}),
        (
            lambda: SimpleCNN(input_shape=[1, 28, 28], num_classes=10),
            (1, 28, 28),
            {"lr": 0.05, "momentum": 0.9, "weight_decay": 1e-4},
        ),
        (  # not one of the zoo's layered models: through vmap
            lambda: nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(576, 10)),
            (1, 14, 14),
            {"lr": 0.05, "momentum": 0.9},
        ),
    ],
    ids=["mlp", "cnn", "vmap"],
)
def test_lockstep_clients_end_where_each_alone_ends(make, shape, settings) -> None:
    torch.manual_seed(0)
    sizes = [40, 23, 7, 40, 31]  # unequal: 4, 3, 1, 4 and 4 batches of 10 (last ones smaller)
    models = [make() for _ in sizes]
    data = _data(sizes, shape, batch=10, seed=1)
    alone = [copy.deepcopy(m) for m in models]
    expected = [_alone(m, d, **settings) for m, d in zip(alone, data, strict=True)]
    trainer, losses = _lockstep(models, data, **settings)
    for i, model in enumerate(alone):
        got = trainer.client_state(i)
        for name, want in model.state_dict().items():
            assert torch.allclose(got[name], want, rtol=1e-5, atol=1e-6), (i, name)
        assert losses[i] == pytest.approx(expected[i], rel=1e-5)
        assert len(losses[i]) == -(-sizes[i] // 10)  # stopped when its batches ran out


def test_a_model_with_batch_statistics_or_random_layers_is_named() -> None:
    assert lockstep_problem(MLP(input_shape=[4], num_classes=2)) is None
    net = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.1))
    assert lockstep_problem(net) == "its layer 1 (BatchNorm1d)"
    with pytest.raises(ValueError, match=r"cannot train in lockstep: its layer 1 \(BatchNorm1d"):
        LockstepSgd([net], lr=0.1)


def test_the_zoos_layered_models_run_the_stacked_forward_and_others_vmap() -> None:
    """The stacked forward gives each client's own logits (channels-last grouped
    convolutions, batched products); a model it does not know is left to vmap."""
    torch.manual_seed(2)
    models = [SimpleCNN(input_shape=[3, 16, 16], num_classes=5) for _ in range(3)]
    forward = stacked_forward(models[0])
    assert forward is not None
    params = {k: torch.stack([dict(m.named_parameters())[k] for m in models]) for k, _ in
              models[0].named_parameters()}  # fmt: skip
    x = torch.randn(3, 4, 3, 16, 16)
    with torch.no_grad():
        got = forward(params, x)
        for i, model in enumerate(models):
            torch.testing.assert_close(got[i], model(x[i]), rtol=1e-5, atol=1e-6)
    assert stacked_forward(nn.Sequential(nn.Linear(2, 2))) is None
    odd = MLP(input_shape=[4], num_classes=2)
    odd.features.append(nn.Tanh())  # a layer it does not know
    assert stacked_forward(odd) is None

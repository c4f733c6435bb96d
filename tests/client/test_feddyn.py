"""FedDyn's local rule on a 4-parameter linear model: loss term, g_k update, state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, RecordDict
from torch import nn

from client_app.algorithms.base import LocalContext
from client_app.algorithms.fedavg import FedAvgRule
from client_app.algorithms.feddyn import GRAD_STATE, FedDynRule
from client_app.state import ClientState
from client_app.trainer import TrainSettings, train_locally
from fl_system.learning.models import MLP

CPU = torch.device("cpu")
LR = 0.1
NAMES = ("classifier.weight", "classifier.bias")  # shapes (2, 1) and (2,)


def _data(n: int = 12) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 1)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64)


def _model() -> MLP:
    torch.manual_seed(0)
    return MLP(input_shape=[1], num_classes=2, hidden=())


def _record(weight: list[float], bias: list[float]) -> ArrayRecord:
    return ArrayRecord(
        {
            NAMES[0]: Array(np.array(weight, np.float32).reshape(2, 1)),
            NAMES[1]: Array(np.array(bias, np.float32)),
        }
    )


def _state(root: Path, memory: RecordDict | None = None, server_round: int = 1) -> ClientState:
    memory = memory if memory is not None else RecordDict()
    return ClientState(memory, root, "run-a", 1, server_round)


def _params(model: nn.Module) -> dict[str, np.ndarray]:
    return {n: p.detach().numpy().astype(np.float64) for n, p in model.named_parameters()}


def _train(rule, state, steps: int = 5):
    model = _model()
    x, y = _data()
    settings = TrainSettings(local_steps=steps, batch_size=4, lr=LR)
    result = train_locally(model, x, y, rule, settings, seed=5, device=CPU, state=state)
    return model, result


G = _record([0.5, -2.0], [1.0, 0.25])


def test_loss_term_gradient_is_minus_g_plus_alpha_times_drift(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.save(GRAD_STATE, G)
    model = _model()
    ctx = LocalContext(
        model=model,
        global_params=[p.detach().clone() for p in model.parameters()],
        device=CPU,
        lr=LR,
        received=RecordDict(),
        state=state,
    )
    rule = FedDynRule(alpha=0.2)
    rule.begin(ctx)
    with torch.no_grad():
        model.classifier.weight.add_(1.5)
        model.classifier.bias.sub_(0.5)
    term = rule.loss_term(ctx, None, None, None, None)  # type: ignore[arg-type]
    term.backward()
    torch.testing.assert_close(
        model.classifier.weight.grad, torch.tensor([[-0.5 + 0.2 * 1.5], [2.0 + 0.2 * 1.5]])
    )
    torch.testing.assert_close(
        model.classifier.bias.grad, torch.tensor([-1.0 - 0.2 * 0.5, -0.25 - 0.2 * 0.5])
    )
    w = {n: p.detach() for n, p in model.named_parameters()}
    expected = 0.5 * 0.2 * (1.5**2 * 2 + 0.5**2 * 2) - sum(
        float((torch.from_numpy(G[n].numpy()) * w[n]).sum()) for n in NAMES
    )
    assert term.item() == pytest.approx(expected, rel=1e-6)


def test_grad_state_update_is_exact(tmp_path: Path) -> None:
    """g_k <- g_k - alpha (w_k - w_t), saved under the rule's state name."""
    state = _state(tmp_path)
    state.save(GRAD_STATE, G)
    w_t = _params(_model())
    model, result = _train(FedDynRule(alpha=0.3), state)
    assert len(result.extras) == 0  # nothing extra goes up: g_k stays on the client
    w_k = _params(model)
    saved = state.load(GRAD_STATE)
    assert sorted(saved.keys()) == sorted(NAMES)
    for name in NAMES:
        expected = G[name].numpy().astype(np.float64) - 0.3 * (w_k[name] - w_t[name])
        np.testing.assert_allclose(saved[name].numpy(), expected, rtol=1e-6, atol=1e-7)
        assert saved[name].numpy().dtype == np.float32


def test_first_round_starts_from_zero_grad_state(tmp_path: Path) -> None:
    state = _state(tmp_path)
    w_t = _params(_model())
    model, _ = _train(FedDynRule(alpha=0.3), state)
    w_k = _params(model)
    for name in NAMES:
        np.testing.assert_allclose(
            state.load(GRAD_STATE)[name].numpy(), -0.3 * (w_k[name] - w_t[name]), atol=1e-7
        )


def test_regulariser_changes_training(tmp_path: Path) -> None:
    plain, _ = _train(FedAvgRule(), None)
    state = _state(tmp_path)
    state.save(GRAD_STATE, G)
    dyn, _ = _train(FedDynRule(alpha=0.3), state)
    assert not np.allclose(_params(plain)[NAMES[0]], _params(dyn)[NAMES[0]])


def test_grad_state_survives_rounds_and_a_supernode_restart(tmp_path: Path) -> None:
    memory = RecordDict()
    _train(FedDynRule(alpha=0.3), _state(tmp_path, memory))
    g1 = {n: v.numpy().copy() for n, v in memory.array_records[GRAD_STATE].items()}
    assert any(np.any(v != 0) for v in g1.values())

    # a restarted SuperNode: fresh context.state, same state directory
    fresh = RecordDict()
    w_t = _params(_model())
    model, _ = _train(FedDynRule(alpha=0.3), _state(tmp_path, fresh, 2))
    w_k = _params(model)
    for name in NAMES:
        expected = g1[name].astype(np.float64) - 0.3 * (w_k[name] - w_t[name])
        np.testing.assert_allclose(
            fresh.array_records[GRAD_STATE][name].numpy(), expected, rtol=1e-6, atol=1e-7
        )
    # the disk copy is the latest one too
    on_disk = _state(tmp_path, RecordDict(), 3).load(GRAD_STATE)
    for name in NAMES:
        np.testing.assert_array_equal(
            on_disk[name].numpy(), fresh.array_records[GRAD_STATE][name].numpy()
        )


def test_gradient_clipping_bounds_one_step(tmp_path: Path) -> None:
    w_t = _params(_model())
    model, _ = _train(FedDynRule(alpha=0.3, max_grad_norm=0.01), _state(tmp_path), steps=1)
    w_k = _params(model)
    moved = np.sqrt(sum(np.sum((w_k[n] - w_t[n]) ** 2) for n in NAMES))
    assert moved == pytest.approx(LR * 0.01, rel=1e-4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"alpha": 0.0}, "feddyn alpha must be a number > 0"),
        ({"alpha": -0.1}, "feddyn alpha must be a number > 0"),
        ({"alpha": 0.1, "max_grad_norm": 0}, "feddyn max_grad_norm must be > 0 or null"),
    ],
)
def test_arguments_are_validated(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FedDynRule(**kwargs)


def test_needs_client_state() -> None:
    with pytest.raises(RuntimeError, match="needs client state"):
        _train(FedDynRule(alpha=0.1), None)

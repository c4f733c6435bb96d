"""SCAFFOLD's local rule on a 4-parameter linear model: correction sign, c_i update, state."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, RecordDict
from torch import nn

from client_app.algorithms.base import LocalContext, LocalRule
from client_app.algorithms.fedavg import FedAvgRule
from client_app.algorithms.scaffold import C_I_STATE, ScaffoldRule
from client_app.state import ClientState
from client_app.trainer import TrainSettings, train_locally
from fl_system.algorithms.scaffold import SCAFFOLD_C, SCAFFOLD_DELTA_C
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
    return ClientState(memory, root, "run-a", 3, server_round)


def _params(model: nn.Module) -> dict[str, np.ndarray]:
    return {n: p.detach().numpy().astype(np.float64) for n, p in model.named_parameters()}


def _train(rule, *, c: ArrayRecord | None, state, steps: int, batch_size: int = 4):
    model = _model()
    x, y = _data()
    received = RecordDict({SCAFFOLD_C: c}) if c is not None else RecordDict()
    settings = TrainSettings(local_steps=steps, batch_size=batch_size, lr=LR)
    result = train_locally(
        model, x, y, rule, settings, seed=5, device=CPU, received=received, state=state
    )
    return model, result


C = _record([0.5, 0.5], [0.5, 0.5])


def test_correction_moves_weights_down_by_lr_times_c_minus_ci(tmp_path: Path) -> None:
    """One step with c - c_i = 0.5 everywhere: w = w_sgd - lr * 0.5, same seed."""
    plain, _ = _train(FedAvgRule(), c=None, state=None, steps=1)
    corrected, _ = _train(ScaffoldRule(), c=C, state=_state(tmp_path), steps=1)
    for name in NAMES:
        np.testing.assert_allclose(
            _params(corrected)[name], _params(plain)[name] - LR * 0.5, rtol=0, atol=1e-7
        )


class _GradientCorrection(LocalRule):
    """The paper's form: add (c - c_i) to the gradient before a plain SGD step."""

    def __init__(self, correction: list[torch.Tensor]) -> None:
        self.correction = correction

    def before_step(self, ctx: LocalContext) -> None:
        for p, d in zip(ctx.model.parameters(), self.correction, strict=True):
            p.grad.add_(d)


def test_weight_correction_equals_gradient_correction_with_plain_sgd(tmp_path: Path) -> None:
    state = _state(tmp_path)
    state.save(C_I_STATE, _record([0.25, -1.0], [2.0, 0.0]))
    c = _record([-0.5, 1.0], [0.5, 0.75])
    ours, _ = _train(ScaffoldRule(), c=c, state=state, steps=6)
    diff = [torch.tensor([[-0.75], [2.0]]), torch.tensor([-1.5, 0.75])]
    paper, _ = _train(_GradientCorrection(diff), c=None, state=None, steps=6)
    for name in NAMES:
        np.testing.assert_allclose(_params(ours)[name], _params(paper)[name], atol=1e-6)


def test_option_two_update_of_c_i_and_the_reply(tmp_path: Path) -> None:
    """c_i+ = c_i - c + (w_g - w_k) / (steps * lr); reply dc = c_i+ - c_i."""
    state = _state(tmp_path)
    c_i = _record([0.25, -1.0], [2.0, 0.0])
    state.save(C_I_STATE, c_i)
    c = _record([-0.5, 1.0], [0.5, 0.75])
    w_g = _params(_model())
    model, result = _train(ScaffoldRule(), c=c, state=state, steps=7)
    assert result.steps == 7
    w_k = _params(model)
    saved = state.load(C_I_STATE)
    delta = result.extras.array_records[SCAFFOLD_DELTA_C]
    assert sorted(saved.keys()) == sorted(NAMES) == sorted(delta.keys())
    for name in NAMES:
        old = c_i[name].numpy().astype(np.float64)
        expected = old - c[name].numpy() + (w_g[name] - w_k[name]) / (7 * LR)
        np.testing.assert_allclose(saved[name].numpy(), expected, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(delta[name].numpy(), saved[name].numpy() - old, atol=1e-6)
        assert saved[name].numpy().dtype == np.float32 == delta[name].numpy().dtype


def test_one_full_batch_step_makes_c_i_the_gradient_at_the_global_model(tmp_path: Path) -> None:
    """With one step, w_k = w_g - lr (grad + c - c_i), so c_i+ = grad f_k(w_g) exactly."""
    state = _state(tmp_path)
    _, result = _train(ScaffoldRule(), c=C, state=state, steps=1, batch_size=12)
    model = _model()
    x, y = _data()
    loss = nn.functional.cross_entropy(model(torch.from_numpy(x)), torch.from_numpy(y))
    loss.backward()
    saved = state.load(C_I_STATE)
    for name, p in model.named_parameters():
        np.testing.assert_allclose(saved[name].numpy(), p.grad.numpy(), atol=2e-6)
        delta = result.extras.array_records[SCAFFOLD_DELTA_C][name].numpy()
        np.testing.assert_allclose(delta, p.grad.numpy(), atol=2e-6)  # c_i was 0


def test_c_i_survives_rounds_and_a_supernode_restart(tmp_path: Path) -> None:
    memory = RecordDict()
    _, first = _train(ScaffoldRule(), c=C, state=_state(tmp_path, memory), steps=3)
    c_i1 = {n: v.numpy().copy() for n, v in _state(tmp_path, memory).load(C_I_STATE).items()}
    assert any(np.any(v != 0) for v in c_i1.values())

    # the restarted SuperNode has an empty context.state: c_i comes back from disk
    restarted = _state(tmp_path, RecordDict(), 2)
    loaded = restarted.load(C_I_STATE)
    for name in NAMES:
        np.testing.assert_array_equal(loaded[name].numpy(), c_i1[name])
    w_g = _params(_model())
    model, second = _train(ScaffoldRule(), c=C, state=_state(tmp_path, RecordDict(), 2), steps=3)
    # the round-2 correction used the loaded c_i: c_i2 - c_i1 = -c + (w_g - w_k)/(steps lr)
    w_k = _params(model)
    delta = second.extras.array_records[SCAFFOLD_DELTA_C]
    for name in NAMES:
        expected = -C[name].numpy() + (w_g[name] - w_k[name]) / (3 * LR)
        np.testing.assert_allclose(delta[name].numpy(), expected, rtol=1e-5, atol=1e-5)
    # and the correction differed from round 1's, which started from c_i = 0
    plain_delta = first.extras.array_records[SCAFFOLD_DELTA_C]
    assert not np.allclose(delta[NAMES[0]].numpy(), plain_delta[NAMES[0]].numpy())


def test_missing_c_or_state_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no ArrayRecord 'scaffold-c'"):
        _train(ScaffoldRule(), c=None, state=_state(tmp_path), steps=1)
    with pytest.raises(RuntimeError, match="needs client state"):
        _train(ScaffoldRule(), c=C, state=None, steps=1)
    wrong = ArrayRecord({NAMES[0]: Array(np.zeros(3, np.float32))})
    with pytest.raises(
        ValueError, match=r"server control variate c 'classifier\.weight' has shape \(3,\)"
    ):
        _train(ScaffoldRule(), c=wrong, state=_state(tmp_path), steps=1)

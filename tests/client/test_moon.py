"""MOON's local rule: the contrastive loss by hand, mu = 0 is FedAvg, the previous model
survives a SuperNode restart."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, RecordDict

from client_app.algorithms.base import LocalContext
from client_app.algorithms.fedavg import FedAvgRule
from client_app.algorithms.moon import PREV_MODEL, MoonRule, contrastive_loss
from client_app.state import ClientState
from client_app.trainer import TrainSettings, train_locally
from fl_system.learning.models import MLP

CPU = torch.device("cpu")
SETTINGS = TrainSettings(batch_size=8, lr=0.1)


def _data(n: int = 40) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype(np.float32)
    return x, (x[:, 0] > 0).astype(np.int64)


def _model(init_seed: int = 0) -> MLP:
    """One hidden layer of 3 ReLU units: those are the penultimate features MOON contrasts."""
    torch.manual_seed(init_seed)
    return MLP(input_shape=[4], num_classes=2, hidden=(3,))


def _state(root: Path, memory: RecordDict | None = None, server_round: int = 1) -> ClientState:
    memory = memory if memory is not None else RecordDict()
    return ClientState(memory, root, "run-a", 3, server_round)


def _train(rule, state: ClientState | None, start: MLP | None = None, seed: int = 5) -> MLP:
    model = start if start is not None else _model()
    x, y = _data()
    train_locally(model, x, y, rule, SETTINGS, seed=seed, device=CPU, state=state)
    return model


def _weights(model: MLP) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def _same(a: MLP, b: MLP) -> bool:
    return all(torch.equal(x, y) for x, y in zip(_weights(a), _weights(b), strict=True))


# ----- the loss on hand-made feature vectors -------------------------------------------------
def test_contrastive_loss_exact_2d_example() -> None:
    # z = (1, 0); z_glob = (1, 1): cos = 1/sqrt(2); z_prev = (0, 1): cos = 0; T = 0.5
    # l = -log(e^{sqrt2} / (e^{sqrt2} + e^0)) = log(1 + e^{-sqrt2}) = 0.2176217...
    z = torch.tensor([[1.0, 0.0]])
    loss = contrastive_loss(z, torch.tensor([[1.0, 1.0]]), torch.tensor([[0.0, 1.0]]), 0.5)
    assert loss.item() == pytest.approx(math.log(1 + math.exp(-math.sqrt(2))), abs=1e-6)
    assert loss.item() == pytest.approx(0.2176217, abs=1e-6)


def test_closer_to_global_than_to_previous_gives_the_smaller_loss() -> None:
    glob, prev = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 1.0]])
    # z = z_glob: sims (1, 0) -> log(1 + e^{-2}); z = z_prev: sims (0, 1) -> log(1 + e^{2})
    at_glob = contrastive_loss(glob, glob, prev, 0.5).item()
    at_prev = contrastive_loss(prev, glob, prev, 0.5).item()
    assert at_glob == pytest.approx(math.log(1 + math.exp(-2)), abs=1e-6)
    assert at_prev == pytest.approx(math.log(1 + math.exp(2)), abs=1e-6)
    assert at_glob < at_prev


def test_loss_is_the_batch_mean_and_ignores_scale() -> None:
    glob, prev = torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    z = torch.tensor([[3.0, 0.0], [0.0, 0.2]])  # row 0 along z_glob, row 1 along z_prev
    expected = 0.5 * (math.log(1 + math.exp(-2)) + math.log(1 + math.exp(2)))
    assert contrastive_loss(z, glob, prev, 0.5).item() == pytest.approx(expected, abs=1e-6)


# ----- the rule's wiring: which model gives z_glob, which z_prev -------------------------------
def test_rule_contrasts_against_the_received_global_and_the_saved_previous_model(
    tmp_path: Path,
) -> None:
    state = _state(tmp_path)
    previous, model, glob = _model(init_seed=1), _model(init_seed=2), _model(init_seed=2)
    with torch.no_grad():  # positive hidden biases: no all-zero ReLU feature vector
        for m in (previous, model, glob):
            m.features[1].bias.add_(2.0)
    state.save(PREV_MODEL, ArrayRecord(previous.state_dict()))
    # `model` holds the received global weights (= glob's) when `begin` runs
    ctx = LocalContext(
        model=model, global_params=_weights(model), device=CPU, lr=0.1, received=RecordDict(),
        state=state,
    )  # fmt: skip
    rule = MoonRule(mu=0.3, temperature=0.5)
    rule.begin(ctx)
    with torch.no_grad():  # local training has moved the model away from the global one
        model.features[1].weight[0].add_(0.3)
        model.features[1].bias.add_(torch.tensor([1.0, -0.5, 0.5]))
    x = torch.as_tensor(_data(6)[0])
    features = model.features(x)
    term = rule.loss_term(ctx, x, None, None, features)  # type: ignore[arg-type]

    def cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))

    with torch.no_grad():
        z, zg, zp = (m.features(x).double().numpy() for m in (model, glob, previous))
    assert np.all(np.linalg.norm(z, axis=1) > 0) and np.all(np.linalg.norm(zg, axis=1) > 0)
    assert np.all(np.linalg.norm(zp, axis=1) > 0)
    pos, neg = cos(z, zg) / 0.5, cos(z, zp) / 0.5
    expected = 0.3 * np.mean(-np.log(np.exp(pos) / (np.exp(pos) + np.exp(neg))))
    assert term.item() == pytest.approx(expected, abs=1e-6)
    term.backward()  # gradients reach the local model only
    assert model.features[1].weight.grad is not None
    rule.finish(ctx)
    assert not ctx.extras  # the frozen copies are released


# ----- training ---------------------------------------------------------------------------------
def test_mu_zero_trains_exactly_like_fedavg(tmp_path: Path) -> None:
    state = _state(tmp_path)
    moon_1 = _train(MoonRule(mu=0.0), state)
    fedavg_1 = _train(FedAvgRule(), None)
    assert _same(moon_1, fedavg_1)
    assert state.load(PREV_MODEL) is not None  # a previous model exists for round 2 ...
    moon_2 = _train(MoonRule(mu=0.0), state, start=moon_1, seed=6)
    fedavg_2 = _train(FedAvgRule(), None, start=fedavg_1, seed=6)
    assert _same(moon_2, fedavg_2)


def test_first_round_has_no_contrastive_term_then_it_acts(tmp_path: Path) -> None:
    state = _state(tmp_path)
    round_1 = _train(MoonRule(mu=1.0), state)
    plain = _train(FedAvgRule(), None)
    assert _same(round_1, plain)
    saved = state.load(PREV_MODEL).to_torch_state_dict()
    assert all(torch.equal(saved[k], v) for k, v in round_1.state_dict().items())
    # round 2 from a global model that differs from this client's previous local model
    round_2 = _train(MoonRule(mu=1.0), state, start=_model(4), seed=6)
    plain_2 = _train(FedAvgRule(), None, start=_model(4), seed=6)
    assert not torch.equal(round_2.features[1].weight, plain_2.features[1].weight)


def test_previous_model_survives_a_supernode_restart(tmp_path: Path) -> None:
    memory = RecordDict()  # context.state of the node that keeps running
    trained = _train(MoonRule(mu=1.0), _state(tmp_path, memory))
    # the restarted node: new process, empty context.state, same state directory
    record = _state(tmp_path, RecordDict(), 2).load(PREV_MODEL)
    assert record is not None
    reloaded = record.to_torch_state_dict()
    assert list(reloaded) == list(trained.state_dict())
    assert all(torch.equal(reloaded[k], v) for k, v in trained.state_dict().items())
    # round 2 trains identically on a restarted node (previous model read from disk) and on
    # the node that kept it in memory
    restarted = _train(MoonRule(mu=1.0), _state(tmp_path, RecordDict(), 2), _model(4), seed=6)
    kept = _train(MoonRule(mu=1.0), _state(tmp_path, memory, 2), _model(4), seed=6)
    assert _same(restarted, kept)
    # ... and differently from a node that lost its previous model (no contrastive term)
    lost = _train(MoonRule(mu=1.0), _state(tmp_path / "empty", RecordDict(), 2), _model(4), seed=6)
    assert not torch.equal(restarted.features[1].weight, lost.features[1].weight)


def test_moon_needs_client_state_and_valid_settings() -> None:
    with pytest.raises(ValueError, match="client state"):
        _train(MoonRule(mu=0.1), None)
    with pytest.raises(ValueError, match="mu must be a finite number >= 0"):
        MoonRule(mu=-0.1)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        MoonRule(mu=0.1, temperature=0.0)
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        MoonRule(mu=0.1, temperature=float("nan"))

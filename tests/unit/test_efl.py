"""EFL's math (algorithms.efl) and straggler budgets (learning.stragglers): EFL spec
2.1, 2.5, 5, 6.4 and the checks of section 7."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fl_system.algorithms.efl import (
    decode_fisher,
    encode_fisher,
    penalty_gradient,
    penalty_value,
    progress_factor,
    stable_sums,
)
from fl_system.learning.codecs import CodecError
from fl_system.learning.stragglers import persistent_budget, round_budget

RNG = np.random.default_rng(0)


def test_penalty_gradient_is_the_autograd_gradient_of_the_penalty() -> None:
    u = RNG.random(7)
    v = RNG.standard_normal(7)
    w = torch.tensor(RNG.standard_normal(7), requires_grad=True)
    lam = 0.3
    (
        0.5 * lam * torch.sum(torch.tensor(u) * w * w) - lam * torch.sum(torch.tensor(v) * w)
    ).backward()
    expected = w.grad.numpy()
    got = penalty_gradient(w.detach().numpy(), u, v, lam)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    on_tensors = penalty_gradient(w.detach(), torch.tensor(u), torch.tensor(v), lam)
    np.testing.assert_allclose(on_tensors.numpy(), expected, rtol=1e-12)


def test_penalty_value_matches_finite_differences_of_its_gradient() -> None:
    u, v, w = RNG.random(5), RNG.standard_normal(5), RNG.standard_normal(5)
    eps = 1e-6
    numeric = [
        (penalty_value(w + eps * e, u, v, 2.0) - penalty_value(w - eps * e, u, v, 2.0)) / (2 * eps)
        for e in np.eye(5)
    ]
    np.testing.assert_allclose(numeric, penalty_gradient(w, u, v, 2.0), rtol=1e-6)


def test_penalty_pulls_each_coordinate_to_the_fisher_weighted_mean_of_client_models() -> None:
    """Two clients' (u_i, w_i): the gradient vanishes at sum u_i w_i / sum u_i, per coordinate."""
    u1, w1 = np.array([1.0, 3.0, 0.0]), np.array([2.0, -1.0, 5.0])
    u2, w2 = np.array([3.0, 1.0, 0.0]), np.array([6.0, 3.0, 7.0])
    fisher, weighted = u1 + u2, u1 * w1 + u2 * w2
    centre = np.array([5.0, 0.0, 123.0])  # (2 + 18) / 4, (-3 + 3) / 4, anything where U = 0
    assert penalty_gradient(centre, fisher, weighted, 0.7).tolist() == [0.0, 0.0, 0.0]


def test_the_sums_are_clamped_where_sgd_on_the_penalty_would_diverge() -> None:
    """Limit 1 / (0.05 * 0.2) = 100: U = 250 becomes 100 and V = 500 becomes 200, so the pull
    still points at V / U = 2 (the Fisher-weighted mean of the models)."""
    fisher = np.array([0.5, 10.0, 250.0, 0.0], dtype=np.float32)
    weighted = np.array([1.0, -5.0, 500.0, 3.0], dtype=np.float32)
    u, v, clipped = stable_sums(fisher, weighted, lr=0.05, lam=0.2)
    assert u.tolist() == [0.5, 10.0, 100.0, 0.0]
    assert v.tolist() == [1.0, -5.0, 200.0, 3.0]
    assert clipped == 1
    assert u.dtype == v.dtype == np.float32
    assert stable_sums(fisher, weighted, lr=0.05, lam=0.0)[2] == 0  # no penalty: no guard


def test_clamped_sgd_on_the_penalty_settles_at_the_weighted_mean() -> None:
    """lr lambda U = 250 x 0.01 = 2.5 would diverge; clamped, 50 steps reach V / U."""
    fisher, weighted = np.array([250.0]), np.array([500.0])
    u, v, _ = stable_sums(fisher, weighted, lr=0.05, lam=0.2)
    w = np.array([-3.0])
    for _ in range(50):
        w = w - 0.05 * penalty_gradient(w, u, v, 0.2)
    assert w.tolist() == pytest.approx([2.0])


def test_progress_factor_is_e_over_s_with_an_optional_cap() -> None:
    """Spec 2.5: p_tau^k = E p^k / s, so p_tau^k s = E p^k for every active client."""
    assert progress_factor(20, 20) == 1.0
    assert progress_factor(20, 5) == 4.0
    assert progress_factor(20, 1) == 20.0
    assert progress_factor(20, 1, cap=10) == 10.0
    assert progress_factor(20, 8, cap=10) == 2.5
    sizes, steps = np.array([100, 300, 600]), np.array([20, 10, 4])
    p = sizes / sizes.sum()
    weights = p * [progress_factor(20, s) for s in steps]
    np.testing.assert_allclose(weights * steps, 20 * p)


@pytest.mark.parametrize("steps", [0, -1, 21])
def test_progress_factor_needs_steps_done_within_the_budget(steps: int) -> None:
    with pytest.raises(ValueError, match=r"steps done must be in 1\.\.20"):
        progress_factor(20, steps)


def test_half_the_steps_times_two_is_a_full_client_to_first_order() -> None:
    """Spec 7: gradient descent on f(w) = a w^2 / 2 from w0; c (w_s - w0) with s = E / 2, c = 2
    equals the full client's progress up to O(lr)."""
    a, w0, lr, full = 3.0, 1.5, 1e-4, 20
    progress = {s: w0 * ((1 - lr * a) ** s - 1) for s in (full // 2, full)}
    compensated = progress_factor(full, full // 2) * progress[full // 2]
    assert compensated == pytest.approx(progress[full], rel=10 * lr * a)
    assert compensated != progress[full]  # equal to first order only


def test_budgets_are_a_function_of_seed_round_and_partition() -> None:
    draw = dict(seed=3, steps=20, incomplete=0.5, inactive=0.1)
    first = [
        round_budget(server_round=r, partition=k, **draw) for r in range(1, 6) for k in range(8)
    ]
    again = [
        round_budget(server_round=r, partition=k, **draw) for r in range(1, 6) for k in range(8)
    ]
    assert first == again
    other_seed = [
        round_budget(server_round=r, partition=k, **{**draw, "seed": 4})
        for r in range(1, 6)
        for k in range(8)
    ]
    assert first != other_seed


def test_budget_frequencies_follow_the_probabilities() -> None:
    budgets = np.array(
        [
            round_budget(
                seed=0, server_round=r, partition=k, steps=20, incomplete=0.5, inactive=0.1
            )
            for r in range(1, 201)
            for k in range(20)
        ]
    )
    inactive, incomplete = budgets == 0, (budgets > 0) & (budgets < 20)
    # 4000 draws: within 4 standard errors of 0.1 and 0.9 x 0.5 = 0.45
    assert abs(inactive.mean() - 0.1) < 4 * np.sqrt(0.1 * 0.9 / 4000)
    assert abs(incomplete.mean() - 0.45) < 4 * np.sqrt(0.45 * 0.55 / 4000)
    assert set(budgets[incomplete].tolist()) == set(range(1, 20))  # uniform on 1..E-1


def test_budget_edge_cases() -> None:
    kw = dict(seed=0, server_round=1, partition=0, steps=20)
    assert round_budget(**kw, incomplete=0.0, inactive=0.0) == 20
    assert round_budget(**kw, incomplete=0.0, inactive=1.0) == 0
    assert 1 <= round_budget(**kw, incomplete=1.0, inactive=0.0) <= 19
    assert round_budget(**{**kw, "steps": 1}, incomplete=1.0, inactive=0.0) == 1  # no 1..0


@pytest.mark.parametrize(
    "key,value", [("incomplete", 1.5), ("inactive", -0.1), ("incomplete", True)]
)
def test_bad_probabilities_are_named(key: str, value: float) -> None:
    probabilities = {"incomplete": 0.0, "inactive": 0.0, key: value}
    with pytest.raises(ValueError, match=f"stragglers.{key} must be a probability in"):
        round_budget(seed=0, server_round=1, partition=0, steps=20, **probabilities)


def test_persistent_budgets_are_fixed_per_client() -> None:
    budgets = [
        persistent_budget(seed=1, partition=k, steps=20, sigma=0.5, deadline=12) for k in range(50)
    ]
    again = [
        persistent_budget(seed=1, partition=k, steps=20, sigma=0.5, deadline=12) for k in range(50)
    ]
    assert budgets == again
    assert min(budgets) < 20 and max(budgets) == 20  # some always slow, the fast ones capped at E
    assert persistent_budget(seed=1, partition=0, steps=20, sigma=0.0, deadline=12) == 12


# ----- fisher_comm: how u, v and U, V travel (spec 2.9) ----------------------------------
U6 = np.array([0.5, 3.0, 0.0, 2.0, 3.0, 1.0], np.float32)
V6 = np.array([1.0, -6.0, 0.0, 4.0, 1.5, -1.0], np.float32)


def test_dense_fisher_travels_as_float32_unchanged() -> None:
    u, v, positions = encode_fisher(U6, V6, comm="dense", q=0.5)
    assert positions is None and u.dtype == np.float32
    back = decode_fisher(u, v, positions, (2, 3))
    assert back[0].tolist() == U6.reshape(2, 3).tolist()
    assert back[1].tolist() == V6.reshape(2, 3).tolist()


def test_fp16_fisher_halves_the_bytes() -> None:
    u, v, positions = encode_fisher(U6, V6, comm="fp16", q=0.5)
    assert u.dtype == v.dtype == np.float16 and positions is None
    assert u.nbytes == U6.nbytes // 2
    assert decode_fisher(u, v, None, (6,))[0].dtype == np.float32


def test_topk_fisher_keeps_the_largest_u_with_the_v_at_the_same_positions() -> None:
    """q = 0.5 of 6 entries: k = 3; the two 3.0 and then 2.0; positions 1, 3, 4 Golomb-Rice
    coded at b = 0 (gaps 2, 2, 1 in unary)."""
    u, v, positions = encode_fisher(U6, V6, comm="topk", q=0.5)
    assert u.tolist() == [3.0, 2.0, 3.0] and v.tolist() == [-6.0, 4.0, 1.5]
    assert positions == bytes([0b10_10_0_000])
    du, dv = decode_fisher(u, v, positions, (6,))
    assert du.tolist() == [0.0, 3.0, 0.0, 2.0, 3.0, 0.0]
    assert dv.tolist() == [0.0, -6.0, 0.0, 4.0, 1.5, 0.0]
    # ties go to the lower position, and k >= 1 however small q is
    u, _, positions = encode_fisher(U6, V6, comm="topk", q=0.01)
    assert u.tolist() == [3.0] and positions == bytes([0b01_0_00000])  # b = 2 at k / n = 1/6


@pytest.mark.parametrize(
    "u,v,positions,problem",
    [
        ([1.0, 2.0], [1.0], None, "u has 2 entries but v has 1"),
        ([1.0, 2.0], [1.0, 2.0], None, "2 entries sent for a tensor of 6"),
        ([1.0], [1.0], bytes([0b11_10_0000]), "position 7 is past a tensor of 6 entries"),
        ([1.0, 2.0], [1.0, 2.0], bytes([0b01_100_100]), "1 bytes, its 2 gaps use 5 bits"),
        ([1.0], [1.0], bytes(2), "2 bytes, its 1 gaps use 3 bits"),
        ([1.0] * 7, [1.0] * 7, b"", "7 values do not fit a tensor of 6"),
    ],
)
def test_a_fisher_message_that_does_not_fit_is_refused(u, v, positions, problem) -> None:
    with pytest.raises(CodecError, match=problem):
        decode_fisher(np.array(u, np.float32), np.array(v, np.float32), positions, (6,))

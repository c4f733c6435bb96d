"""FedProx's Synthetic(alpha, beta) federated dataset, as a pure numpy generator.

Follows `generate_niid.py` from the FedProx repository draw for draw (in the same order),
with `np.random.default_rng(seed)` instead of the global RNG, so that every node rebuilds the
same data from the seed alone. alpha controls how much the local models differ between users,
beta how much their inputs differ.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SyntheticUsers:
    """All generated samples; `user[i]` is the user (natural owner) of sample i."""

    x: np.ndarray  # float32 (N, dimension)
    y: np.ndarray  # int64 (N,)
    user: np.ndarray  # int64 (N,)


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@dataclass(frozen=True)
class SyntheticDraw:
    """Synthetic(alpha, beta) about to be drawn: each user's sample count, then the users'
    samples one at a time (`users`), so that a caller can place them where they go without
    ever holding the float64 draws of every user (10,000 users: 1.1 GB, twice over when
    concatenated)."""

    sizes: np.ndarray  # int64 (num_users,)
    num_classes: int
    _rng: np.random.Generator
    _mean_w: np.ndarray
    _mean_x: np.ndarray
    _std_x: np.ndarray

    @property
    def dimension(self) -> int:
        return int(self._mean_x.shape[1])

    def users(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(x float64 (n_k, dimension), y int64 (n_k,)) of user 0, 1, ... in order; once."""
        dimension = self.dimension
        for k, size in enumerate(self.sizes):
            w = self._rng.normal(self._mean_w[k], 1, (dimension, self.num_classes))
            b = self._rng.normal(self._mean_w[k], 1, self.num_classes)  # mean_b = mean_w
            xx = self._mean_x[k] + self._rng.standard_normal((int(size), dimension)) * self._std_x
            yield xx, np.argmax(_softmax(xx @ w + b), axis=1).astype(np.int64)


def draw_synthetic(
    *,
    alpha: float,
    beta: float,
    num_users: int,
    dimension: int,
    num_classes: int,
    seed: int,
    max_samples_per_user: int = 1000,
) -> SyntheticDraw:
    """Synthetic(alpha, beta)'s sizes and per-user parameters, drawn; its samples follow.

    `max_samples_per_user` caps FedProx's lognormal(4, 2) + 50 sizes, whose tail reaches tens
    of thousands; the cap keeps tests and small runs fast without changing the generator.
    """
    if num_users < 1 or dimension < 1 or num_classes < 2:
        raise ValueError(
            f"synthetic needs num_users >= 1, dimension >= 1, num_classes >= 2; "
            f"got {num_users}, {dimension}, {num_classes}"
        )
    if max_samples_per_user < 1:
        raise ValueError(f"max_samples_per_user must be >= 1, got {max_samples_per_user}")
    rng = np.random.default_rng(seed)
    sizes = rng.lognormal(4, 2, num_users).astype(np.int64) + 50
    sizes = np.minimum(sizes, max_samples_per_user)
    mean_w = rng.normal(0, alpha, num_users)
    b_shift = rng.normal(0, beta, num_users)
    # Sigma is diagonal (Sigma_jj = j^-1.2): independent normals scaled by its root, which is
    # multivariate_normal's distribution without its SVD (LAPACK in a simulation's server
    # thread has hung in OpenBLAS's thread pool)
    std_x = np.power(np.arange(1, dimension + 1, dtype=np.float64), -0.6)
    mean_x = np.stack([rng.normal(b_shift[k], 1, dimension) for k in range(num_users)])
    return SyntheticDraw(sizes, num_classes, rng, mean_w, mean_x, std_x)


def generate_synthetic(**kwargs: int | float) -> SyntheticUsers:
    """Every sample of Synthetic(alpha, beta) (`draw_synthetic`'s arguments), grouped by user,
    users in order."""
    draw = draw_synthetic(**kwargs)  # type: ignore[arg-type]
    total = int(draw.sizes.sum())
    x, y = np.empty((total, draw.dimension), np.float32), np.empty(total, np.int64)
    at = 0
    for xx, yy in draw.users():
        x[at : at + len(yy)], y[at : at + len(yy)] = xx, yy
        at += len(yy)
    user = np.repeat(np.arange(len(draw.sizes), dtype=np.int64), draw.sizes)
    return SyntheticUsers(x=x, y=y, user=user)

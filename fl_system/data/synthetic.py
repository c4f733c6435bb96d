"""FedProx's Synthetic(alpha, beta) federated dataset, as a pure numpy generator.

Follows `generate_niid.py` from the FedProx repository draw for draw (in the same order),
with `np.random.default_rng(seed)` instead of the global RNG, so that every node rebuilds the
same data from the seed alone. alpha controls how much the local models differ between users,
beta how much their inputs differ.
"""

from __future__ import annotations

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


def generate_synthetic(
    *,
    alpha: float,
    beta: float,
    num_users: int,
    dimension: int,
    num_classes: int,
    seed: int,
    max_samples_per_user: int = 1000,
) -> SyntheticUsers:
    """Generate Synthetic(alpha, beta); samples are grouped by user, users in order.

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
    mean_b = mean_w
    b_shift = rng.normal(0, beta, num_users)
    # Sigma is diagonal (Sigma_jj = j^-1.2): independent normals scaled by its root, which is
    # multivariate_normal's distribution without its SVD (LAPACK in a simulation's server
    # thread has hung in OpenBLAS's thread pool)
    std_x = np.power(np.arange(1, dimension + 1, dtype=np.float64), -0.6)
    mean_x = np.stack([rng.normal(b_shift[k], 1, dimension) for k in range(num_users)])

    xs, ys = [], []
    for k in range(num_users):
        w = rng.normal(mean_w[k], 1, (dimension, num_classes))
        b = rng.normal(mean_b[k], 1, num_classes)
        xx = mean_x[k] + rng.standard_normal((int(sizes[k]), dimension)) * std_x
        xs.append(xx)
        ys.append(np.argmax(_softmax(xx @ w + b), axis=1))
    return SyntheticUsers(
        x=np.concatenate(xs).astype(np.float32),
        y=np.concatenate(ys).astype(np.int64),
        user=np.repeat(np.arange(num_users, dtype=np.int64), sizes),
    )

"""STEM's momentum (Khanduri et al., NeurIPS 2021; TACO spec 2), as a plain function.

    d_k = g(w_k; xi_k) + (1 - a) (d_{k-1} - g(w_{k-1}; xi_k))

Both gradients are taken on the same mini-batch xi_k, at the current and the previous
weights: a variance-reduced momentum that costs two gradient evaluations per step. It works
on numpy arrays and torch tensors alike.
"""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")  # np.ndarray or torch.Tensor


def stem_direction(grad: T, previous_grad: T, previous_direction: T, a: float) -> T:
    """d_k from g(w_k; xi_k), g(w_{k-1}; xi_k) and d_{k-1}."""
    return grad + (1.0 - a) * (previous_direction - previous_grad)

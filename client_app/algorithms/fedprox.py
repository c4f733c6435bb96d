"""FedProx's client: local objective F_k(w) + (mu / 2) * ||w - w_t||^2."""

from __future__ import annotations

import torch

from client_app.algorithms.base import LocalContext, LocalRule


class FedProxRule(LocalRule):
    """Adds the proximal term that keeps local weights near the round's global model."""

    def __init__(self, *, mu: float) -> None:
        if mu < 0:
            raise ValueError(f"fedprox mu must be >= 0, got {mu}")
        self.mu = mu

    def loss_term(
        self,
        ctx: LocalContext,
        x: torch.Tensor,
        y: torch.Tensor,
        logits: torch.Tensor,
        features: torch.Tensor | None,
    ) -> torch.Tensor | None:
        if self.mu == 0:
            return None
        params = [p for p in ctx.model.parameters() if p.requires_grad]
        sq = sum(((p - g) ** 2).sum() for p, g in zip(params, ctx.global_params, strict=True))
        return 0.5 * self.mu * sq

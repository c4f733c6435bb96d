"""TACO's client (TACO spec 1.3, 7 A1): local SGD with a tailored correction.

Every step adds gamma (1 - alpha_i) delta_scale Delta_t to the gradient, where Delta_t =
u / (K lr) is the last global update u = w_{t-1} - w_t (received as
`TACO_LAST_UPDATE`) in per-step units and alpha_i the client's tailored coefficient
(config `TACO_ALPHA`). With plain SGD each step then moves the weights by an extra
gamma (1 - alpha_i) delta_scale u / K, and a round of K steps by gamma (1 - alpha_i)
delta_scale u. delta_scale = 1 reads the paper literally (at gamma = 1/K the correction is
(1 - alpha_i) / K of the last step, negligible); delta_scale = K (the default) is the reading
under which the paper's gamma findings and ablation make sense: a heavy-ball momentum of
1 - alpha_i per client. The term goes into the gradient, so an optimiser with momentum sees
"g + correction" as the paper writes it. In the first round u = 0 and training is FedAvg's.
`correction=False` turns it off (the ablation of Table VI). The server half is
`server_app/strategies/taco.py`.
"""

from __future__ import annotations

import torch

from client_app.algorithms.base import LocalContext, LocalRule
from fl_system.algorithms.taco import (
    TACO_ALPHA,
    TACO_LAST_UPDATE,
    correction_constants,
    correction_per_step,
)
from fl_system.messages import protocol


class TacoRule(LocalRule):
    """Adds the constant tailored correction to every local step's gradient."""

    def __init__(
        self,
        *,
        local_steps: int | None,
        gamma: float | None = None,
        delta_scale: float | None = None,
        correction: bool = True,
    ) -> None:
        self.local_steps, self.gamma, self.delta_scale = correction_constants(
            local_steps, gamma, delta_scale
        )
        self.correction = bool(correction)

    def begin(self, ctx: LocalContext) -> None:
        ctx.extras["taco"] = []
        if not self.correction or self.gamma == 0:
            return
        update = ctx.received.array_records.get(TACO_LAST_UPDATE)
        config = ctx.received.config_records.get(protocol.CONFIG, {})
        if update is None or TACO_ALPHA not in config:
            raise ValueError(
                f"taco: the train message lacks '{TACO_LAST_UPDATE}' or "
                f"'{TACO_ALPHA}' (is the server running the taco strategy?)"
            )
        alpha = float(config[TACO_ALPHA])
        for name, p in ctx.model.named_parameters():
            if not p.requires_grad:
                continue
            if name not in update:
                raise ValueError(f"taco: the last global update has no layer '{name}'")
            u = update[name].numpy()
            if tuple(u.shape) != tuple(p.shape):
                raise ValueError(
                    f"taco: the last global update's '{name}' has shape {u.shape}, "
                    f"the parameter {tuple(p.shape)}"
                )
            if not u.any():
                continue
            shift = correction_per_step(
                u,
                alpha=alpha,
                gamma=self.gamma,
                local_steps=self.local_steps,
                delta_scale=self.delta_scale,
            )
            term = torch.as_tensor(shift / ctx.lr, dtype=p.dtype, device=p.device)
            ctx.extras["taco"].append((p, term))

    def before_step(self, ctx: LocalContext) -> None:
        for p, term in ctx.extras["taco"]:
            if p.grad is not None:
                p.grad.add_(term)

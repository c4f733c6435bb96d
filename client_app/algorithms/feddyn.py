"""FedDyn's client (Acar et al., ICLR 2021): the dynamic regulariser.

The client keeps its gradient state g_k (zeros at first) in `ClientState` under
`GRAD_STATE`, so it survives rounds and SuperNode restarts. With w_t the model received
this round (the server's theta_cld) and alpha the FedDyn coefficient, local training
minimises

    f_k(w) - <g_k, w> + (alpha / 2) * ||w - w_t||^2

and after the round, with w_k the trained model,

    g_k <- g_k - alpha * (w_k - w_t)

(the first-order condition of the local problem makes g_k the client's gradient at w_k).
The authors' code stores h_k = -g_k / alpha instead and adds h_k += w_k - w_t; the server's
h is the mean over all clients of g_k (see `server_app/strategies/feddyn.py`).

Variant: the plain rule. The authors' code adds gradient clipping at norm 10; set
`max_grad_norm` to use it (default: off). Only trainable parameters take part.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, RecordDict

from client_app.algorithms.base import LocalContext, LocalRule

GRAD_STATE = "feddyn-grad-state"  # ClientState record: this client's g_k


class FedDynRule(LocalRule):
    """Linear term -<g_k, w>, proximal term alpha/2 ||w - w_t||^2, and the g_k update."""

    def __init__(self, *, alpha: float, max_grad_norm: float | None = None) -> None:
        if isinstance(alpha, bool) or not isinstance(alpha, int | float) or not alpha > 0:
            raise ValueError(f"feddyn alpha must be a number > 0, got {alpha!r}")
        if max_grad_norm is not None and not (
            isinstance(max_grad_norm, int | float) and max_grad_norm > 0
        ):
            raise ValueError(f"feddyn max_grad_norm must be > 0 or null, got {max_grad_norm!r}")
        self.alpha = float(alpha)
        self.max_grad_norm = None if max_grad_norm is None else float(max_grad_norm)

    def begin(self, ctx: LocalContext) -> None:
        if ctx.state is None:
            raise RuntimeError("feddyn needs client state to keep its gradient state g_k")
        saved = ctx.state.load(GRAD_STATE)
        entries = []  # (name, param, w_t, g_k as float64 numpy)
        for (name, p), w_t in zip(ctx.model.named_parameters(), ctx.global_params, strict=True):
            if not p.requires_grad:
                continue
            if saved is None:
                g = np.zeros(tuple(p.shape), np.float64)
            elif name not in saved or tuple(saved[name].shape) != tuple(p.shape):
                raise ValueError(
                    f"feddyn: saved gradient state does not match parameter '{name}' "
                    f"{tuple(p.shape)}"
                )
            else:
                g = saved[name].numpy().astype(np.float64)
            entries.append((name, p, w_t, g))
        ctx.extras["feddyn"] = entries
        ctx.extras["feddyn-g"] = [
            torch.as_tensor(g, dtype=p.dtype, device=p.device) for _, p, _, g in entries
        ]

    def loss_term(
        self,
        ctx: LocalContext,
        x: torch.Tensor,
        y: torch.Tensor,
        logits: torch.Tensor,
        features: torch.Tensor | None,
    ) -> torch.Tensor | None:
        linear = torch.zeros((), device=ctx.device)
        quadratic = torch.zeros((), device=ctx.device)
        for (_, p, w_t, _), g in zip(ctx.extras["feddyn"], ctx.extras["feddyn-g"], strict=True):
            linear = linear + (g * p).sum()
            quadratic = quadratic + ((p - w_t) ** 2).sum()
        return 0.5 * self.alpha * quadratic - linear

    def before_step(self, ctx: LocalContext) -> None:
        if self.max_grad_norm is not None:
            params = [p for _, p, _, _ in ctx.extras["feddyn"]]
            torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)

    def finish(self, ctx: LocalContext) -> RecordDict:
        assert ctx.state is not None
        updated: dict[str, Array] = {}
        for name, p, w_t, g in ctx.extras["feddyn"]:
            w_k = p.detach().cpu().numpy()
            drift = w_k.astype(np.float64) - w_t.detach().cpu().numpy().astype(np.float64)
            updated[name] = Array((g - self.alpha * drift).astype(w_k.dtype))
        ctx.state.save(GRAD_STATE, ArrayRecord(updated))
        return RecordDict()

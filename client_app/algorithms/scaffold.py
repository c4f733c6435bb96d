"""SCAFFOLD's client (Karimireddy et al., ICML 2020), option II control variates.

The client keeps its control variate c_i (zeros at first) in `ClientState` under
`C_I_STATE`, so it survives rounds and SuperNode restarts. With c the server's control
variate (received as `protocol.SCAFFOLD_C`), w_g the received global model, lr the local
learning rate, m the optimiser's momentum and `steps` the optimiser steps of the round:

    every step, before the optimiser:  grad <- grad + (c - c_i)
    after the round:                   c_i+ = c_i - c + (w_g - w_k) / (K_eff * lr)
    reply:                             dc_i = c_i+ - c_i   (ArrayRecord `protocol.SCAFFOLD_DELTA_C`)

K_eff is `effective_steps(steps, m)`: how far `steps` heavy-ball steps from a fresh momentum
buffer move along a constant gradient, in units of lr. With plain SGD (m = 0) K_eff = steps,
and this is the paper's rule, equal to FedDisco's code (which corrects the weights by
lr * (c - c_i) after each step). With momentum that code divides by steps * lr although the
weights moved about 1/(1 - m) times further, so c_i comes out several times too large and,
on strongly skewed partitions (the FedDisco NIID-2 preset, m = 0.9), the run diverges; here
the optimiser sees the corrected gradient, so momentum scales gradient and correction alike,
and c_i is estimated with the same scale. Only trainable parameters are corrected; control
variates are keyed by parameter name. The server half is `server_app/strategies/scaffold.py`.
"""

from __future__ import annotations

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, RecordDict

from client_app.algorithms.base import LocalContext, LocalRule
from fl_system import protocol

C_I_STATE = "scaffold-c-i"  # ClientState record: this client's control variate c_i


def effective_steps(steps: int, momentum: float) -> float:
    """Distance, in lr units, that `steps` heavy-ball steps travel along a constant gradient.

    Step k (1-based) of SGD with momentum m from a zero buffer moves lr * (1 - m^k) / (1 - m)
    times the gradient; the sum over k = 1..steps is (steps - m (1 - m^steps) / (1 - m)) /
    (1 - m), which is `steps` when m = 0.
    """
    if not 0 <= momentum < 1:
        raise ValueError(f"momentum must be in [0, 1), got {momentum}")
    if momentum == 0:
        return float(steps)
    m = momentum
    return (steps - m * (1 - m**steps) / (1 - m)) / (1 - m)


class ScaffoldRule(LocalRule):
    """Corrects every local gradient by (c - c_i) and updates c_i (option II)."""

    def begin(self, ctx: LocalContext) -> None:
        if ctx.state is None:
            raise RuntimeError("scaffold needs client state to keep its control variate c_i")
        c_record = ctx.received.array_records.get(protocol.SCAFFOLD_C)
        if c_record is None:
            raise ValueError(
                f"scaffold: the train message has no ArrayRecord '{protocol.SCAFFOLD_C}' "
                "(is the server running the scaffold strategy?)"
            )
        saved = ctx.state.load(C_I_STATE)
        entries = []  # (param, global copy, c, c_i) for each trainable parameter
        for (name, p), g in zip(ctx.model.named_parameters(), ctx.global_params, strict=True):
            if not p.requires_grad:
                continue
            c = _named(c_record, name, p, "server control variate c")
            c_i = np.zeros(c.shape, np.float64) if saved is None else _named(saved, name, p, "c_i")
            entries.append((name, p, g, c, c_i))
        if saved is not None and set(saved.keys()) != {e[0] for e in entries}:
            raise ValueError(
                f"scaffold: saved c_i has layers {sorted(saved.keys())}, the model's trainable "
                f"parameters are {sorted(e[0] for e in entries)}"
            )
        ctx.extras["scaffold"] = entries
        ctx.extras["scaffold-correction"] = [
            torch.as_tensor(c - c_i, dtype=p.dtype, device=p.device) for _, p, _, c, c_i in entries
        ]

    def before_step(self, ctx: LocalContext) -> None:
        entries = ctx.extras["scaffold"]
        for (_, p, _, _, _), corr in zip(entries, ctx.extras["scaffold-correction"], strict=True):
            if p.grad is None:  # a parameter this batch did not reach still drifts by c - c_i
                p.grad = corr.clone()
            else:
                p.grad.add_(corr)

    def finish(self, ctx: LocalContext) -> RecordDict:
        assert ctx.state is not None
        distance = effective_steps(ctx.steps, ctx.momentum) * ctx.lr
        new_c_i: dict[str, Array] = {}
        delta: dict[str, Array] = {}
        for name, p, g, c, c_i in ctx.extras["scaffold"]:
            dtype = p.detach().cpu().numpy().dtype
            if ctx.steps > 0:
                w_k = p.detach().cpu().numpy().astype(np.float64)
                w_g = g.detach().cpu().numpy().astype(np.float64)
                updated = c_i - c + (w_g - w_k) / distance
            else:  # no local step: nothing learned about this client's drift
                updated = c_i
            stored = updated.astype(dtype)
            new_c_i[name] = Array(stored)
            delta[name] = Array((stored.astype(np.float64) - c_i).astype(dtype))
        ctx.state.save(C_I_STATE, ArrayRecord(new_c_i))
        return RecordDict({protocol.SCAFFOLD_DELTA_C: ArrayRecord(delta)})


def _named(record: ArrayRecord, name: str, p: torch.Tensor, what: str) -> np.ndarray:
    """`record[name]` as float64, checked against parameter `p`'s shape."""
    if name not in record:
        raise ValueError(f"scaffold: {what} has no entry for parameter '{name}'")
    arr = record[name].numpy().astype(np.float64)
    if tuple(arr.shape) != tuple(p.shape):
        raise ValueError(
            f"scaffold: {what} '{name}' has shape {arr.shape}, the parameter {tuple(p.shape)}"
        )
    return arr

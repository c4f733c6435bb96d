"""EFL's client (Elastic Federated Learning; EFL spec 2.1-2.4, 2.8): the elastic penalty and
the Fisher diagonal.

Every local step adds lambda (U * w - V) to the gradient of the data loss, where U and V
are the server's sums over last round's reporters of their Fisher diagonals u_i and of
u_i * w_i (`fl_system.efl`): parameters that were informative for other clients are held
near where those clients left them. U is clamped to 1 / (lr lambda) so that plain SGD on the
penalty cannot diverge (spec 6.4). After training the client sends its own u (the empirical
Fisher diagonal: mean squared per-sample gradient of the data loss over `fisher_samples`
examples at its end model) and v = u * w. A straggler (stragglers.incomplete) scales its
progress by E / s, capped at theta. With lambda = 0 and no stragglers training is FedAvg's,
bitwise.
The server half is `server_app/strategies/efl.py`.
"""

from __future__ import annotations

from logging import INFO

import torch
from flwr.app import Array, ArrayRecord, RecordDict
from flwr.common.logger import log as flwr_log

from client_app.algorithms.base import LocalContext, LocalRule
from client_app.per_sample import gradient_moments
from fl_system import protocol
from fl_system.efl import penalty_gradient, progress_factor, stable_fisher_sum
from fl_system.seeding import derive_seed

_FISHER_SEED = 0xF15  # separates the Fisher sample draw from the batches of the round


class EflRule(LocalRule):
    """Local SGD on f_k + the elastic penalty; replies with u and u * w."""

    def __init__(
        self,
        *,
        lam: float,
        fisher_samples: int = 256,
        max_steps: int | None = None,
        theta: float | None = None,
    ) -> None:
        if isinstance(lam, bool) or not isinstance(lam, int | float) or lam < 0:
            raise ValueError(f"efl lam must be a number >= 0, got {lam!r}")
        samples_ok = isinstance(fisher_samples, int) and not isinstance(fisher_samples, bool)
        if not samples_ok or fisher_samples < 1:
            raise ValueError(f"efl fisher_samples must be an integer >= 1, got {fisher_samples!r}")
        if theta is not None and (isinstance(theta, bool) or not theta >= 1):
            raise ValueError(f"efl theta (the cap on E / s) must be null or >= 1, got {theta!r}")
        self.lam = float(lam)
        self.fisher_samples = fisher_samples
        self.max_steps = max_steps
        self.theta = theta

    def begin(self, ctx: LocalContext) -> None:
        if self.lam == 0:
            return
        sums = [
            ctx.received.array_records.get(k)
            for k in (protocol.EFL_FISHER_SUM, protocol.EFL_WEIGHTED_SUM)
        ]
        if any(record is None for record in sums):
            raise ValueError(
                f"efl: the train message lacks '{protocol.EFL_FISHER_SUM}' or "
                f"'{protocol.EFL_WEIGHTED_SUM}' (is the server running the efl strategy?)"
            )
        fisher, weighted = sums
        terms, clipped = [], 0
        for name, p in ctx.model.named_parameters():
            if not p.requires_grad or name not in fisher:
                continue
            u, n = stable_fisher_sum(fisher[name].numpy(), lr=ctx.lr, lam=self.lam)
            clipped += n
            as_tensor = {"dtype": p.dtype, "device": p.device}
            terms.append(
                (
                    p,
                    torch.as_tensor(u, **as_tensor),
                    torch.as_tensor(weighted[name].numpy(), **as_tensor),
                )
            )
        ctx.extras["efl"] = terms
        if clipped:
            flwr_log(INFO, "efl: %d entries of U clamped to 1 / (lr lambda)", clipped)

    def before_step(self, ctx: LocalContext) -> None:
        if self.lam == 0:
            return
        for p, u, v in ctx.extras["efl"]:
            if p.grad is not None:
                p.grad.add_(penalty_gradient(p.detach(), u, v, self.lam))

    def finish(self, ctx: LocalContext) -> RecordDict:
        assert ctx.data is not None, "the trainer passes the local data"
        named = [(k, p) for k, p in ctx.model.named_parameters() if p.requires_grad]
        _, second, _ = gradient_moments(
            ctx.model,
            *ctx.data,
            samples=self.fisher_samples,
            seed=derive_seed(ctx.seed, _FISHER_SEED),
            device=ctx.device,
        )
        fisher, weighted, start = {}, {}, 0
        for name, p in named:
            w = p.detach().cpu().numpy()
            u = second[start : start + w.size].reshape(w.shape).astype(w.dtype)
            start += w.size
            fisher[name], weighted[name] = Array(u), Array(u * w)
        self._compensate(ctx)
        return RecordDict(
            {protocol.EFL_FISHER: ArrayRecord(fisher), protocol.EFL_WEIGHTED: ArrayRecord(weighted)}
        )

    def _compensate(self, ctx: LocalContext) -> None:
        """A straggler that did s of E steps sends w0 + c (w - w0), c = min(E / s, theta), so
        that its update counts like a complete one (spec 2.5; on the client, before any
        compression's error feedback, spec 6.7). u and v stay at the weights it reached."""
        if self.max_steps is None or not 0 < ctx.steps < self.max_steps:
            return
        factor = progress_factor(self.max_steps, ctx.steps, cap=self.theta)
        with torch.no_grad():
            for p, start in zip(ctx.model.parameters(), ctx.global_params, strict=True):
                if p.requires_grad:
                    p.copy_(start + factor * (p - start))

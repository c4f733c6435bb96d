"""EFL's client (Elastic Federated Learning; EFL spec 2.1-2.4, 2.8): the elastic penalty and
the Fisher diagonal.

Every local step adds lambda (U * w - V) to the gradient of the data loss, where U and V
are the server's sums over last round's reporters of their Fisher diagonals u_i and of
u_i * w_i (`fl_system.algorithms.efl`): parameters that were informative for other clients are held
near where those clients left them. U is clamped to 1 / (lr lambda), V scaled with it, so
that plain SGD on the penalty cannot diverge (spec 6.4). After training the client sends its
own u (the empirical Fisher diagonal: mean squared per-sample gradient of the data loss
over `fisher_samples` examples at its end model) and v = u * w. A straggler
(stragglers.incomplete) scales its progress by E / s, capped at theta. With lambda = 0 and
no stragglers training is FedAvg's, bitwise.

`fisher_mode="batch"` replaces the per-sample estimate by the mean over mini-batches of
B (mini-batch mean gradient)^2 (spec 2.2): one backward per batch instead of per-sample
gradients, but biased. With per-sample gradients of mean m and variance s^2, a batch of B
gives s^2 + B m^2 in expectation against the empirical Fisher's s^2 + m^2: it overstates
every coordinate by (B - 1) m^2, most where the client's examples agree. B = 1 is exact.
`fisher_comm` / `fisher_q` say how u, v travel (`fl_system.algorithms.efl.fisher_records`);
the server's `efl-fisher-due` flag (fisher_every) says whether they are sent this round.
The server half is `server_app/strategies/efl.py`.
"""

from __future__ import annotations

from logging import INFO

import numpy as np
import torch
from flwr.app import ConfigRecord, RecordDict
from flwr.common.logger import log as flwr_log
from torch import nn

from client_app.addons import LocalData
from client_app.algorithms.base import LocalContext, LocalRule
from client_app.per_sample import gradient_moments
from fl_system.algorithms.efl import (
    EFL_DOWN,
    EFL_FISHER_DUE,
    EFL_PENALTY,
    EFL_UP,
    FISHER_COMM,
    FISHER_MODES,
    fisher_records,
    penalty_gradient,
    penalty_value,
    progress_factor,
    read_fisher,
    stable_sums,
)
from fl_system.learning.codecs import CodecError
from fl_system.learning.seeding import derive_seed
from fl_system.messages import protocol

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
        fisher_mode: str = "empirical",
        fisher_comm: str = "dense",
        fisher_q: float = 0.01,
        batch_size: int = 32,
    ) -> None:
        if isinstance(lam, bool) or not isinstance(lam, int | float) or lam < 0:
            raise ValueError(f"efl lam must be a number >= 0, got {lam!r}")
        samples_ok = isinstance(fisher_samples, int) and not isinstance(fisher_samples, bool)
        if not samples_ok or fisher_samples < 1:
            raise ValueError(f"efl fisher_samples must be an integer >= 1, got {fisher_samples!r}")
        if theta is not None and (isinstance(theta, bool) or not theta >= 1):
            raise ValueError(f"efl theta (the cap on E / s) must be null or >= 1, got {theta!r}")
        if fisher_mode not in FISHER_MODES:
            raise ValueError(
                f"efl fisher_mode must be one of {', '.join(FISHER_MODES)}, got {fisher_mode!r}"
            )
        if fisher_comm not in FISHER_COMM:
            raise ValueError(
                f"efl fisher_comm must be one of {', '.join(FISHER_COMM)}, got {fisher_comm!r}"
            )
        self.lam = float(lam)
        self.fisher_samples = fisher_samples
        self.max_steps = max_steps
        self.theta = theta
        self.fisher_mode, self.fisher_comm, self.fisher_q = fisher_mode, fisher_comm, fisher_q
        self.batch_size = batch_size
        self._penalty: float | None = None  # at the end model, for the reply's metrics

    def begin(self, ctx: LocalContext) -> None:
        if self.lam == 0:
            return
        # the server's U, V cover every float layer it averages (BatchNorm's running
        # statistics too); the penalty applies to the trainable parameters among them
        state = ctx.model.state_dict()
        shapes = {k: tuple(v.shape) for k, v in state.items() if v.is_floating_point()}
        try:
            sums = read_fisher(ctx.received, EFL_DOWN, shapes)
        except CodecError as err:
            raise ValueError(
                f"efl: the train message's U, V: {err} (is the server running the efl strategy?)"
            ) from None
        terms, clipped = [], 0
        for name, p in ctx.model.named_parameters():
            if name not in sums or not p.requires_grad:
                continue
            fisher, weighted = sums[name]
            u, v, n = stable_sums(fisher, weighted, lr=ctx.lr, lam=self.lam)
            clipped += n
            as_tensor = {"dtype": p.dtype, "device": p.device}
            terms.append((p, torch.as_tensor(u, **as_tensor), torch.as_tensor(v, **as_tensor)))
        ctx.extras["efl"] = terms
        if clipped:
            flwr_log(
                INFO, "efl: %d entries of U clamped to 1 / (lr lambda), V scaled alike", clipped
            )

    def before_step(self, ctx: LocalContext) -> None:
        if self.lam == 0:
            return
        for p, u, v in ctx.extras["efl"]:
            if p.grad is not None:
                p.grad.add_(penalty_gradient(p.detach(), u, v, self.lam))

    def finish(self, ctx: LocalContext) -> RecordDict:
        assert ctx.data is not None, "the trainer passes the local data"
        config = ctx.received.config_records.get(protocol.CONFIG, {})
        due = bool(config.get(EFL_FISHER_DUE, True))
        pairs = self._fisher(ctx) if due else None  # at the weights reached, before scaling
        if self.lam > 0:
            self._penalty = sum(
                penalty_value(p.detach().cpu().numpy(), u.cpu().numpy(), v.cpu().numpy(), self.lam)
                for p, u, v in ctx.extras["efl"]
            )
        self._compensate(ctx)
        if pairs is None:
            return RecordDict()
        return fisher_records(pairs, EFL_UP, comm=self.fisher_comm, q=self.fisher_q)

    def reply_metrics(self, data: LocalData, config: ConfigRecord) -> dict[str, float]:
        """The penalty (U, V as clamped) at the end model: 0.5 lam sum(U w^2) - lam sum(V w),
        less its constant, so its changes over rounds carry meaning, not its sign."""
        return {} if self._penalty is None else {EFL_PENALTY: self._penalty}

    def _fisher(self, ctx: LocalContext) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """{layer: (u, u * w)} at the end model, float32 numpy."""
        named = [(k, p) for k, p in ctx.model.named_parameters() if p.requires_grad]
        seed = derive_seed(ctx.seed, _FISHER_SEED)
        if self.fisher_mode == "batch":
            second = batch_fisher(
                ctx.model,
                *ctx.data,
                samples=self.fisher_samples,
                seed=seed,
                batch_size=self.batch_size,
                device=ctx.device,
            )
        else:
            _, second, _ = gradient_moments(
                ctx.model, *ctx.data, samples=self.fisher_samples, seed=seed, device=ctx.device
            )
        pairs, start = {}, 0
        for name, p in named:
            w = p.detach().cpu().numpy()
            u = second[start : start + w.size].reshape(w.shape).astype(w.dtype)
            start += w.size
            pairs[name] = (u, u * w)
        return pairs

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


def batch_fisher(
    model: nn.Module,
    x: np.ndarray,
    y: np.ndarray,
    *,
    samples: int,
    seed: int,
    batch_size: int,
    device: torch.device | None = None,
) -> np.ndarray:
    """fisher_mode="batch": the mean over mini-batches of B_b (mean gradient of batch b)^2,
    float64, flattened like `gradient_moments`, over the same min(samples, n) examples drawn
    with `seed` (eval mode, data loss only)."""
    device = device or torch.device("cpu")
    s = min(samples, len(x))
    idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:s]
    xs = torch.as_tensor(x[idx.numpy()]).to(device)  # a streamed node reads s rows
    ys = torch.as_tensor(y, dtype=torch.long)[idx].to(device)
    params = [p for p in model.parameters() if p.requires_grad]
    total = torch.zeros(sum(p.numel() for p in params), dtype=torch.float64, device=device)
    was_training = model.training
    model.to(device).eval()
    batches = 0
    try:
        for start in range(0, s, batch_size):
            xb, yb = xs[start : start + batch_size], ys[start : start + batch_size]
            loss = nn.functional.cross_entropy(model(xb), yb)
            grads = torch.autograd.grad(loss, params)
            flat = torch.cat([g.reshape(-1) for g in grads]).double()
            total += len(xb) * flat * flat
            batches += 1
    finally:
        model.train(was_training)
    return (total / batches).cpu().numpy()

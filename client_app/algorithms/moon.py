"""MOON's client (Li, He, Song, CVPR 2021): model-contrastive local objective.

    loss = CE(logits, y) + mu * l_con,
    l_con = -log( exp(sim(z, z_glob)/T) / (exp(sim(z, z_glob)/T) + exp(sim(z, z_prev)/T)) )

sim is cosine similarity and z, z_glob, z_prev are the penultimate features (`model.features`,
no projection head, as in the FedDisco authors' code) of the batch under the local model, the
round's global model (frozen) and this client's previous local model (frozen; buffer of one).
l_con is averaged over the batch. Defaults mu = 0.1, T = 0.5 (FedDisco's tuned values).

The previous local model is kept in the client state (`PREV_MODEL`), so it survives SuperNode
restarts. Before a client's first training round there is none: the reference code then has
an empty model pool, the only contrastive logit is the positive one, and the term is exactly
0. Taking z_prev = z_glob instead gives the constant log 2, whose gradient is also 0. Both
train the same, so the term is simply left out until a previous model exists (a client that
joins late, under partial participation, also starts without one).
"""

from __future__ import annotations

import copy
import logging
import math

import torch
import torch.nn.functional as F
from flwr.app import ArrayRecord, RecordDict
from torch import nn

from client_app.algorithms.base import LocalContext, LocalRule

log = logging.getLogger(__name__)

PREV_MODEL = "moon-prev-model"  # ClientState record: the local model after the last round
_GLOBAL = "moon-global-model"  # ctx.extras: frozen copies for this round
_PREV = "moon-prev-model"


def contrastive_loss(
    z: torch.Tensor, z_glob: torch.Tensor, z_prev: torch.Tensor, temperature: float
) -> torch.Tensor:
    """MOON's l_con, averaged over the batch (rows are samples)."""
    pos = F.cosine_similarity(z, z_glob, dim=-1)
    neg = F.cosine_similarity(z, z_prev, dim=-1)
    logits = torch.stack([pos, neg], dim=1) / temperature
    target = torch.zeros(len(z), dtype=torch.long, device=z.device)
    return F.cross_entropy(logits, target)


def _frozen_copy(model: nn.Module) -> nn.Module:
    clone = copy.deepcopy(model)
    clone.eval()
    for p in clone.parameters():
        p.requires_grad_(False)
        p.grad = None
    return clone


class MoonRule(LocalRule):
    """Adds mu * l_con; saves the trained local model as next round's previous model."""

    needs_features = (
        "contrasts the model's penultimate features: give the model `features` and "
        "`classifier` children, or name the child that computes them with "
        "model.feature_layer=NAME"
    )

    def __init__(self, *, mu: float = 0.1, temperature: float = 0.5) -> None:
        if not (isinstance(mu, int | float) and math.isfinite(mu) and mu >= 0):
            raise ValueError(f"moon mu must be a finite number >= 0, got {mu!r}")
        if not (
            isinstance(temperature, int | float) and math.isfinite(temperature) and temperature > 0
        ):
            raise ValueError(f"moon temperature must be a finite number > 0, got {temperature!r}")
        self.mu = float(mu)
        self.temperature = float(temperature)

    def begin(self, ctx: LocalContext) -> None:
        if ctx.state is None:
            raise ValueError(
                "moon keeps the previous local model in the client state: "
                "train_locally needs state=ClientState(...)"
            )
        if self.mu == 0:
            return
        previous = ctx.state.load(PREV_MODEL)
        if previous is None:
            log.info("moon: no previous local model yet; contrastive term starts next round")
            return
        ctx.extras[_GLOBAL] = _frozen_copy(ctx.model)  # weights = the received global model
        prev = _frozen_copy(ctx.model)
        prev.load_state_dict(previous.to_torch_state_dict())
        ctx.extras[_PREV] = prev

    def loss_term(
        self,
        ctx: LocalContext,
        x: torch.Tensor,
        y: torch.Tensor,
        logits: torch.Tensor,
        features: torch.Tensor | None,
    ) -> torch.Tensor | None:
        if _PREV not in ctx.extras:
            return None
        if features is None:
            raise ValueError(f"moon {self.needs_features}")
        with torch.no_grad():
            z_glob = ctx.parts(ctx.extras[_GLOBAL], x)[1]
            z_prev = ctx.parts(ctx.extras[_PREV], x)[1]
        return self.mu * contrastive_loss(features, z_glob, z_prev, self.temperature)

    def finish(self, ctx: LocalContext) -> RecordDict:
        ctx.extras.pop(_GLOBAL, None)
        ctx.extras.pop(_PREV, None)
        assert ctx.state is not None  # checked in begin
        ctx.state.save(PREV_MODEL, ArrayRecord(ctx.model.state_dict()))
        return RecordDict()

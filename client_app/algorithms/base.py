"""The hooks a local rule uses to change local training.

The trainer runs plain mini-batch SGD and calls these hooks; an algorithm's client half
overrides only what it changes (a loss term, a gradient correction, a step correction,
extra reply records, state kept between rounds). A rule also has the ClientApp's hooks
(`client_app.addons.ClientHooks`: handshake and reply metrics, a query answer).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import torch
from flwr.app import RecordDict
from torch import nn

from client_app.addons import ClientHooks
from client_app.state import ClientState
from fl_system.learning.model_parts import Parts, forward_parts


@dataclass
class LocalContext:
    """What a rule can see during one round of local training."""

    model: nn.Module
    global_params: list[torch.Tensor]  # detached copy of the received global parameters
    device: torch.device
    lr: float
    received: RecordDict  # the whole train message content (per-node extras live here)
    state: ClientState | None = None  # survives rounds and SuperNode restarts
    data: tuple[np.ndarray, np.ndarray] | None = None  # the local training data (x, y)
    seed: int = 0  # this round's seed: a rule's own draws derive from it
    steps: int = 0  # optimiser steps taken so far in this round
    extras: dict[str, object] = field(default_factory=dict)  # scratch space for the rule
    parts: Parts = field(default_factory=forward_parts)  # (logits, features) of any model


class LocalRule(ClientHooks):
    """Plain local SGD: every hook is a no-op. This is FedAvg's client."""

    # why the rule needs the model's penultimate features, when it does (checked at start-up)
    needs_features: ClassVar[str | None] = None
    STEP_HOOKS: ClassVar[tuple[str, ...]] = ("loss_term", "before_step", "after_step")

    @classmethod
    def steps_alone(cls) -> tuple[str, ...]:
        """The per-step hooks this rule overrides: with any, each client takes its steps on
        its own (`runtime.backend=vectorized` takes only plain SGD steps in lockstep)."""
        return tuple(h for h in cls.STEP_HOOKS if getattr(cls, h) is not getattr(LocalRule, h))

    def begin(self, ctx: LocalContext) -> None:
        """Called once, after the global weights are loaded and before the first step."""

    def loss_term(
        self,
        ctx: LocalContext,
        x: torch.Tensor,
        y: torch.Tensor,
        logits: torch.Tensor,
        features: torch.Tensor | None,
    ) -> torch.Tensor | None:
        """An extra term added to the cross-entropy loss of one batch.

        `features` are the model's penultimate activations for `x` (what MOON contrasts);
        None for a model that offers none (a rule that needs them sets `needs_features`).
        """
        return None

    def before_step(self, ctx: LocalContext) -> None:
        """After backward, before the optimiser step: the place for gradient corrections."""

    def after_step(self, ctx: LocalContext) -> None:
        """After the optimiser step: the place for corrections applied to the weights."""

    def finish(self, ctx: LocalContext) -> RecordDict:
        """Extra records to send back with the local model (none by default)."""
        return RecordDict()

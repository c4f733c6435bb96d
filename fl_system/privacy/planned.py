"""What a run's privacy account will say at its end, known from its config before it starts:
what a site that takes part only under a privacy guarantee checks (`fl-client --policy`).

The figure is the experiment's own account at its most: `privacy=local` composes each
client's (epsilon, delta) over the rounds it trains in, at most every round; the server-side
fixed-clipping modes compose Flower's RDP accountant once a round over `num_rounds`. A run
whose account would be void or absent (no noise, adaptive clipping, accounting off, noise
from the seed, client statistics published beside it, a weighting the accountant does not
cover) has no figure, only the reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from fl_system.privacy.account import PrivacyAccount
from fl_system.privacy.checks import FIXED, mode


@dataclass(frozen=True)
class PlannedAccount:
    """(epsilon, delta) the run's account reaches if every round releases (Parameters:
    `epsilon`, `delta`; `how` says what was composed, for the sentence that quotes it)."""

    epsilon: float
    delta: float
    how: str


def planned_account(cfg: DictConfig, weighting: str | None) -> PlannedAccount | str:
    """The account of `cfg`'s run over all its rounds, or why the run has none.

    `weighting` is how its strategy weighs clients if not uniformly (the strategy's
    `weighting_under_privacy()`), which the accountant's guarantee does not cover."""
    name = mode(cfg)
    rounds = int(cfg.num_rounds)
    over = f"over {rounds} round{'s' * (rounds != 1)}"
    if name == "none":
        return "privacy=none: no differential privacy"
    if OmegaConf.select(cfg, "privacy.reproducible_noise", default=False):
        return "privacy.reproducible_noise=true: its noise comes from the seed, its epsilon is void"
    if OmegaConf.select(cfg, "privacy.publish_client_stats", default=False):
        return "privacy.publish_client_stats=true: it publishes statistics outside epsilon"
    if name == "local":
        epsilon, delta = float(cfg.privacy.epsilon), float(cfg.privacy.delta)
        return PlannedAccount(
            rounds * epsilon,
            min(rounds * delta, 1.0),
            f"privacy=local, epsilon={epsilon:g} per round {over}",
        )
    if name not in FIXED:
        return f"privacy={name}: Flower's accountant covers fixed clipping only"
    if not cfg.privacy.get("accounting"):
        return f"privacy={name} with privacy.accounting=false"
    if float(cfg.privacy.noise_multiplier) == 0:
        return "privacy.noise_multiplier is 0: no noise"
    if weighting is not None:
        return f"algorithm={cfg.algorithm.name} weighs clients by {weighting}, not uniformly"
    account = PrivacyAccount.for_run(cfg)
    return PlannedAccount(
        account.release(rounds),
        account.delta,
        f"privacy={name}, noise_multiplier={float(cfg.privacy.noise_multiplier):g} {over}",
    )

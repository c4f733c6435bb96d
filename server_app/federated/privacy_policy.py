"""What differential privacy (`privacy=...`) and secure aggregation (`secagg=...`) must know of
a strategy's rule: whether Flower's DP wrappers and mods can wrap it, how it weighs clients
under DP, and whether the server can do with the sum of the clients' updates alone."""

from __future__ import annotations

from typing import ClassVar

from fl_system import privacy


class PrivacyPolicy:
    """What a rule declares for DP, each a phrase for the refusal or None
    (`privacy.check_composition` reads them)."""

    # What its training messages carry besides the model and the config, what its replies
    # carry besides the model, the model its clients start from if not the global one, and
    # how it weighs clients if not by data size (which DP makes uniform).
    extra_down: ClassVar[str | None] = None
    extra_up: ClassVar[str | None] = None
    own_start: ClassVar[str | None] = None
    weighting: ClassVar[str | None] = "a rule of its own"
    # What it decides from the clients' un-noised updates (weights, expulsions), which central
    # DP's noise does not cover: such a rule runs only under privacy=local.
    decides_from_updates: ClassVar[str | None] = None
    # The records beside the model that its server needs only in sum over the clients (and
    # not weighted): secure aggregation sums them beside the update (SCAFFOLD's dc_k).
    summed_up: ClassVar[tuple[str, ...]] = ()

    def privacy_conflict(self, mode: str) -> str | None:
        """Why Flower's DP in `mode` cannot wrap this rule (None: it can)."""
        on_clients = mode in privacy.ON_CLIENTS
        if self.extra_up is not None:
            return f"its replies carry {self.extra_up} beside the model"
        if on_clients and self.extra_down is not None:
            return (
                f"its messages carry {self.extra_down} beside the model (Flower's mods refuse it)"
            )
        if not on_clients and self.own_start is not None:
            return f"its clients start from {self.own_start}, not the model clipping measures from"
        if mode != "local" and self.decides_from_updates is not None:
            return (
                f"it decides {self.decides_from_updates} from the clients' un-noised updates, so "
                "one client moves the average by more than the clipping norm the noise is "
                "calibrated to (privacy=local composes)"
            )
        return None

    def secagg_conflict(self) -> str | None:
        """Why this rule needs more than the weighted sum of its clients' updates, which is
        all secure aggregation shows the server (None: the sum will do)."""
        if self.extra_up is not None and not self.summed_up:
            return (
                f"its replies carry {self.extra_up} beside the model, and secure aggregation "
                "carries beside the update only records needed as a plain sum (SCAFFOLD's)"
            )
        if not self.robust_aggregation:
            return "it combines the client models by a rule of its own, not their weighted average"
        if self.decides_from_updates is not None:
            return f"it decides {self.decides_from_updates} from each client's update"
        gsnr = "its GSNR query sends each client's gradient statistics in the clear"
        return next((gsnr for a in self.addons if a.name == "gsnr"), None)

    def weighting_under_privacy(self) -> str | None:
        """How this run weighs clients if not uniformly under DP (None: uniformly)."""
        for addon in self.addons:
            if addon.weighting is not None:
                return addon.weighting
        return self.weighting

"""`secagg=secaggplus`: the protocol's settings, under Flower's names, and how far the securely
summed average can be from the plain one.

A client's vector v (its update) is weighted by r = round(w / max_weight * T) / T (w its
weight, T = quantization_range), clipped to [-c, c] (c = clipping_range), quantised to
integers with stochastic rounding (an error below one step, 2c / T), masked and summed; the
server divides the unmasked sum by the sum of the r, which travels in the same vector. For n
clients whose weighted vectors stay within [-c, c], each coordinate of the result is within

    n (2c + max|v|) / (T sum(r))

of the plain weighted average sum(w v) / sum(w): n quantisation steps and the rounding of the
n weights, over the summed weight. The bound scales with c and with the vectors: set c to the
size of the weighted updates, not of the model. A plain sum carried the same way (each term
x sent as x / r, so that r (x / r) = x; SCAFFOLD's dc_k, FedDisco's label counts over
max_weight) is within n 2c / T of the true one: one quantisation step per client.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from flwr.server.workflow.secure_aggregation.secaggplus_workflow import SecAggPlusWorkflow
from omegaconf import DictConfig, OmegaConf

from fl_system.privacy.checks import ON_CLIENTS
from fl_system.settings.value_checks import ConfigError


@dataclass(frozen=True)
class SecAggSettings:
    """`secagg.*`: Flower's SecAgg+ settings (`SecAggPlusWorkflow`'s names and meaning).

    Parameters
    ----------
    num_shares : Union[int, float]
        Shares each client's secrets are split into (its neighbours and itself); a float is
        a share of the round's clients.
    reconstruction_threshold : Union[int, float]
        Shares needed to rebuild a secret; a float is a share of `num_shares`.
    clipping_range : float
        Weighted update values are clipped to [-clipping_range, clipping_range].
    quantization_range : int
        Integers a clipped value is quantised into, [0, quantization_range).
    modulus_range : int
        Masks are drawn from [0, modulus_range): a power of 2, above quantization_range.
    max_weight : float
        The largest client weight (examples) expected; weights are taken over it.
    timeout : Optional[float]
        Seconds each stage waits for replies (None: the round's timeout).
    """

    num_shares: int | float = 1.0
    reconstruction_threshold: int | float = 0.5
    clipping_range: float = 8.0
    quantization_range: int = 1 << 22
    modulus_range: int = 1 << 32
    max_weight: float = 1000.0
    timeout: float | None = None

    def check(self) -> None:
        """Flower's own checks of these settings (ValueError or TypeError naming the one)."""
        SecAggPlusWorkflow(
            self.num_shares,
            self.reconstruction_threshold,
            max_weight=self.max_weight,
            clipping_range=self.clipping_range,
            quantization_range=self.quantization_range,
            modulus_range=self.modulus_range,
            timeout=self.timeout,
        )

    def shares_and_threshold(self, clients: int) -> tuple[int, int]:
        """(shares, threshold) for a round of `clients`, as Flower's workflow sets them: a
        fraction of the clients (made odd, at least 3 or all), at most every client."""
        shares = self.num_shares
        if isinstance(shares, float) or shares == 1:
            count = round(float(shares) * clients)
            if count < clients and count % 2 == 0:
                count += 1
            count = clients if count <= 2 else count
        else:
            count = int(shares) + (int(shares) < clients and int(shares) % 2 == 0)
        count = min(count, clients)
        threshold = self.reconstruction_threshold
        if isinstance(threshold, float) or threshold == 1:
            return count, max(round(float(threshold) * count), 2)
        return count, int(threshold)

    def weights(self, weights: Sequence[float]) -> list[float]:
        """The r each client's weight becomes: w / max_weight rounded to 1 / T."""
        t = self.quantization_range
        return [round(w / self.max_weight * t) / t for w in weights]

    def average_error_bound(self, weights: Sequence[float], max_abs: float) -> float:
        """How far each coordinate of the secure average can be from the plain weighted one,
        for these client weights and vectors of at most `max_abs` (module docstring)."""
        r = sum(self.weights(weights))
        n = len(weights)
        return n * (2 * self.clipping_range + max_abs) / (self.quantization_range * r)

    def sum_error_bound(self, clients: int) -> float:
        """How far each coordinate of a plain sum carried beside the update can be from the
        true one, for `clients` terms within [-clipping_range, clipping_range]."""
        return clients * 2 * self.clipping_range / self.quantization_range


def settings_of(cfg: DictConfig) -> SecAggSettings | None:
    """The run's `secagg.*` (None: secagg=none)."""
    node = cfg.get("secagg")
    if node is None or node.name == "none":
        return None
    given = OmegaConf.to_container(node, resolve=True)
    assert isinstance(given, dict)
    return SecAggSettings(
        **{f.name: given[f.name] for f in fields(SecAggSettings) if f.name in given}
    )


def check_secagg(cfg: DictConfig, strategy: Any) -> None:
    """fl-run's check: ConfigError, one line naming why, if secure aggregation cannot run this
    experiment (Flower's own checks of its settings included)."""
    settings = settings_of(cfg)
    if settings is None:
        return
    head = f"secagg={cfg.secagg.name}"
    try:
        settings.check()
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{head}: {err}") from None
    problem = strategy.secagg_conflict()
    if problem is not None:
        raise ConfigError(f"{head} does not compose with algorithm={cfg.algorithm.name}: {problem}")
    for direction in ("up", "down"):
        if (codec := cfg.compression[direction].name) != "none":
            raise ConfigError(
                f"{head} does not compose with compression.{direction}={codec}: masks need "
                "dense vectors, which SecAgg+ quantises itself"
            )
    if (robust := cfg.aggregation.robust.name) != "mean":
        raise ConfigError(
            f"{head} does not compose with aggregation.robust={robust}: the rule needs each "
            "client's update, and the server sees only their sum"
        )
    if (privacy := cfg.privacy.name) not in ("none", *ON_CLIENTS):
        raise ConfigError(
            f"{head} does not compose with privacy={privacy}: the server clips each client's "
            "update, which it no longer sees (DP on the clients composes: privacy=local, "
            "client_fixed, client_adaptive)"
        )
    if (system := cfg.system.name) != "none":
        raise ConfigError(
            f"{head} does not compose with system={system} yet: the virtual clock decides which "
            "replies count (deadlines, sessions) after the secure sum has counted them all"
        )
    clients = int(cfg.clients_per_round or cfg.num_clients)
    if clients < 2:
        raise ConfigError(f"{head} needs 2 clients a round or more, got {clients}")

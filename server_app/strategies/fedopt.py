"""Adaptive server optimisers (Reddi et al., "Adaptive Federated Optimization", ICLR 2021):
the part FedAdam, FedYogi and FedAdagrad share, and the seam to Flower's implementation.

Each round the clients train as FedAvg's do (`client_app.algorithms.fedavg.FedAvgRule`, at
the clients' rate eta_l = train.lr); the server combines their models as every fl_system
strategy does (p_k: data size or an add-on's weights, e.g. Disco's; `aggregation.robust`) and
treats the change Delta_t = sum_k p_k w_k - w_t as a pseudo-gradient:

    m_t     = beta_1 m_{t-1} + (1 - beta_1) Delta_t
    v_t     = Adagrad: v_{t-1} + Delta_t^2
              Yogi:    v_{t-1} - (1 - beta_2) Delta_t^2 sign(v_{t-1} - Delta_t^2)
              Adam:    beta_2 v_{t-1} + (1 - beta_2) Delta_t^2
    w_{t+1} = w_t + eta m_t / (sqrt(v_t) + tau)

(FedAdam's eta is bias-corrected: eta sqrt(1 - beta_2^(t+1)) / (1 - beta_1^(t+1))).

The math is Flower's own (`flwr.serverapp.strategy.FedAdam`, `FedYogi`, `FedAdagrad`): the
strategy holds an instance of Flower's class whose `aggregate_train` takes its average from
`_GivenAverage` instead of Flower's FedAvg step, so Flower's update runs unchanged on the
average fl_system made. Its m_t and v_t are the strategy's checkpointed state.

The optimiser moves the float layers; integer buffers (BatchNorm's counters) are counters,
not parameters, and take the average's value (`fl_system.learning.aggregation.weighted_average`).
The new model is cast back to each layer's dtype: Flower's FedAdam returns float64 (its
bias-corrected eta is a numpy float64), but the model and the clients' replies are float32.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Unpack

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord
from flwr.serverapp.strategy.fedopt import FedOpt as FlowerFedOpt
from omegaconf import OmegaConf

from fl_system.config.algorithm_settings import DECAY, RATE
from fl_system.settings.value_checks import refusal
from server_app.federated.experiment_binding import Common
from server_app.federated.replies import ClientReply
from server_app.federated.state import StrategyState
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import RoundPlan

log = logging.getLogger(__name__)

_M, _V = "fedopt/m_t/", "fedopt/v_t/"


class _GivenAverage(FlowerFedOpt):
    """Stands in for Flower's FedAvg step below FedAdam/FedYogi/FedAdagrad in the method
    order: their `aggregate_train` gets `average` as the aggregated model."""

    average: ArrayRecord | None = None

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        return self.average, None


def flower_optimizer(flower_class: type[FlowerFedOpt], **settings: float) -> _GivenAverage:
    """An instance of Flower's `flower_class` (FedAdam, FedYogi, FedAdagrad) that steps from
    the average it is given (`adaptive_step`) instead of averaging replies itself; the
    settings it takes no argument for (FedAdagrad's beta_1) are its caller's to set."""
    stepper = type(flower_class.__name__, (flower_class, _GivenAverage), {"__module__": __name__})
    accepted = inspect.signature(flower_class.__init__).parameters
    return stepper(**{k: v for k, v in settings.items() if k in accepted})


def adaptive_step(
    optimizer: _GivenAverage,
    server_round: int,
    model: Mapping[str, np.ndarray],
    average: Mapping[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """w_{t+1} from w_t = `model` and the clients' `average`, by Flower's update of
    `optimizer` (an instance from `flower_optimizer`), which keeps m_t and v_t."""
    optimizer.current_arrays = dict(model)
    optimizer.average = ArrayRecord({k: Array(np.asarray(v)) for k, v in average.items()})
    new, _ = optimizer.aggregate_train(server_round, [])
    optimizer.average = None
    assert new is not None
    return {k: new[k].numpy() for k in model}


# tau > 0: at 0 a coordinate whose Delta stays 0 would divide 0 by 0
_RULES = {"eta": RATE, "eta_l": RATE, "tau": RATE, "beta_1": DECAY, "beta_2": DECAY}


def checked(**settings: Any) -> dict[str, float]:
    """The settings as floats; ValueError naming the first one out of its range."""
    for key, value in settings.items():
        if problem := refusal(f"algorithm.{key}", _RULES[key], value):
            raise ValueError(problem)
    return {k: float(v) for k, v in settings.items()}


class FedOpt(FederatedStrategy):
    """FedAvg's average, then one step of a Flower adaptive optimiser on the change it makes.

    Subclasses name Flower's class (`flower_class`); a setting left None is the algorithm's
    (conf/algorithm/<name>.yaml).

    Parameters
    ----------
    eta : Optional[float]
        The server's learning rate.
    eta_l : Optional[float]
        The clients' learning rate: it is `train["lr"]`; another value is refused.
    beta_1 : Optional[float]
        The decay of the first moment m (server momentum), in [0, 1).
    beta_2 : Optional[float]
        The decay of the second moment v, in [0, 1) (not FedAdagrad's).
    tau : Optional[float]
        The adaptivity: w += eta m / (sqrt(v) + tau); larger is less adaptive.
    **common
        The arguments every strategy takes (`FederatedStrategy`): num_clients,
        fraction_train, num_classes, train, seed, options, experiment, addons.
    """

    weighting = None  # data sizes, as FedAvg's (differential privacy turns them uniform)
    flower_class: ClassVar[type[FlowerFedOpt]]

    def __init__(
        self,
        *,
        eta: float | None = None,
        eta_l: float | None = None,
        beta_1: float | None = None,
        beta_2: float | None = None,
        tau: float | None = None,
        **common: Unpack[Common],
    ) -> None:
        given = {"eta": eta, "beta_1": beta_1, "beta_2": beta_2, "tau": tau}
        super().__init__(settings={f"algorithm.{k}": v for k, v in given.items()}, **common)
        if eta_l is not None:
            checked(eta_l=eta_l)
        lr = self.experiment.train.lr
        if eta_l is not None and eta_l != lr:
            raise ValueError(
                f"algorithm.eta_l is the clients' learning rate, train.lr ({lr}): set "
                f"train.lr={eta_l} instead of algorithm.eta_l"
            )
        algorithm = self.experiment.algorithm
        values = {k: OmegaConf.select(algorithm, k) for k in given} | {"eta_l": lr}
        settings = checked(**{k: v for k, v in values.items() if v is not None})
        self.optimizer = flower_optimizer(self.flower_class, **settings)

    def summary(self) -> None:
        """Log what runs, with the optimiser's settings."""
        super().summary()
        opt = self.optimizer
        log.info(
            "\t     eta %g, beta_1 %g, beta_2 %g, tau %g (the clients' eta_l: train.lr)",
            opt.eta, opt.beta_1, opt.beta_2, opt.tau,
        )  # fmt: skip

    def privacy_conflict(self, mode: str) -> str | None:
        """Only noise added on the clients (`privacy=local`) composes: Flower's server-side
        wrappers add theirs to the model this strategy returns, after the adaptive step."""
        if mode != "local":
            return (
                "the server's noise would be added after its adaptive step, which divides "
                "each coordinate by sqrt(v_t) + tau, so one client's influence is no longer "
                "bounded by the clipping norm the noise is calibrated to (privacy=local composes)"
            )
        return super().privacy_conflict(mode)

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        average = self.average(plan, replies, weights)
        start = self.reference(plan, replies[0].partition_id, replies[0])
        names = list(plan.arrays.keys()) or [str(i) for i in range(len(average))]
        floats = {i for i, layer in enumerate(average) if np.issubdtype(layer.dtype, np.floating)}
        stepped = adaptive_step(
            self.optimizer,
            plan.round,
            {names[i]: start[i] for i in floats},
            {names[i]: average[i] for i in floats},
        )
        return [
            stepped[names[i]].astype(layer.dtype) if i in floats else layer
            for i, layer in enumerate(average)
        ]

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> StrategyState:
        """m_t and v_t (absent before the first step), under fedopt/m_t/<layer> and
        fedopt/v_t/<layer>, in their own dtype so that a resumed run is bit-equal."""
        state = super().state_dict()
        for prefix, values in ((_M, self.optimizer.m_t), (_V, self.optimizer.v_t)):
            state.update({f"{prefix}{k}": v.copy() for k, v in (values or {}).items()})
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        mine = {prefix: {} for prefix in (_M, _V)}
        rest = {}
        for key, value in state.items():
            prefix = next((p for p in mine if key.startswith(p)), None)
            if prefix is None:
                rest[key] = value
            else:
                mine[prefix][key[len(prefix) :]] = np.array(value)
        self.optimizer.m_t = mine[_M] or None
        self.optimizer.v_t = mine[_V] or None
        super().load_state_dict(rest)

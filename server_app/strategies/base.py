"""The base every fl_system strategy builds on: a Flower `Strategy`.

Flower's five methods are the whole interface: `configure_train` plans the round (the nodes,
their partitions, sampling, stragglers), runs the exchanges the strategy needs before
training (FedGSNR's statistics query) over the `Grid` it is given, and returns one training
message per node, each with the node's own content; `aggregate_train` screens the replies
leniently (failed ones are set aside with a reason, not fatal), weighs them with p_k (an
add-on's weighting if one is enabled) and returns the new global model;
`configure_evaluate`/`aggregate_evaluate` run per-client evaluation (`client_eval`), and
`summary` logs what runs. So Flower's own `Strategy.start`, its differential-privacy wrappers
and fl_system's driver all run the same rules through the same calls.

Inside, a round is a sequence of exchanges the strategy drives (`round(plan)`,
`server_app.rounds`): the training exchange is the one `configure_train` hands back. What
fl_system adds on top of Flower's strategies: the experiment a strategy is bound to (clients
learn theirs at a handshake, so they need no config of their own), per-partition state that
survives restarts (`state_dict`), lenient reply screening, add-ons that compose with any
rule, and the round's record (`last_round`) that the driver writes to metrics.csv.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Unpack

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy
from omegaconf import OmegaConf

from fl_system import privacy
from fl_system.config.experiment import build_aggregation, build_server_addons
from fl_system.learning.aggregation import normalized
from fl_system.learning.robust import update_norm
from fl_system.messages import protocol
from server_app.addons import Refusal, check_refusals
from server_app.compression import UpdateTally
from server_app.federation import Federation
from server_app.rounds import (
    ClientFailure,
    Exchange,
    RoundPlan,
    RoundRecord,
    RoundResult,
    RoundSteps,
)
from server_app.strategies.experiment_binding import Common, bind_experiment
from server_app.strategies.replies import (
    ClientReply,
    arrays_like,
    reply_mean,
    screen_replies,
    unpack_replies,
)

log = logging.getLogger(__name__)

StrategyState = dict[str, np.ndarray]


@dataclass
class _OpenRound:
    """A round between `configure_train` and `aggregate_train`."""

    plan: RoundPlan
    chosen: int
    grid: Grid
    steps: RoundSteps | None = None  # the round's generator, paused at its training exchange
    sent: list[Message] = field(default_factory=list)  # the training messages as built
    result: RoundResult | None = None  # set when the round ended before training
    replies: list[Message] = field(default_factory=list)
    updates: UpdateTally = field(default_factory=UpdateTally)


class FederatedStrategy(Strategy):
    """Per-node messages, add-ons, lenient reply validation, checkpointable state.

    Subclasses implement `aggregate`, and may override `node_content` (what one node
    receives), `base_weights`, `reject` and `round_metrics`, or `round` itself for rounds of
    another shape. The experiment a strategy runs (`experiment_binding`) is what the clients
    learn at the handshake and where the add-ons and the aggregation guards come from.

    Parameters
    ----------
    num_clients : Optional[int] (default: the experiment's, else 4)
        The SuperNodes of the federation, one partition each; the first round waits for
        them (the ones a round samples).
    fraction_train : Optional[float] (default: 1.0)
        The share of the clients that trains each round, sampled with the seed.
    num_classes : Optional[int] (default: None)
        The number of labels, when the nodes' ClientApp supplies the data: FedDisco's label
        distributions and federated evaluation need it.
    train : Optional[Mapping[str, Any]] (default: the experiment's `train.*`)
        The clients' local training: `lr`, `local_epochs` or `local_steps`, `batch_size`,
        `momentum`, `weight_decay`, `drop_last`.
    seed : Optional[int] (default: 0)
        Seeds client sampling and the clients' batch order (never privacy noise).
    options : Sequence[str] (default: ())
        Further settings, in fl-run's syntax (`["compression.up=st", "client_eval.enabled=true"]`).
    experiment : Optional[Experiment] (default: None)
        What the clients run, instead of the arguments: a composed experiment
        (`fl_system.config.compose.compose_experiment`), or the overrides that compose it, to which
        the arguments above are added.
    addons : Optional[Sequence[ServerAddon]] (default: the experiment's)
        The server halves of add-ons, instead of the ones the experiment enables.
    """

    # Whether a client that did only part of its local steps (a straggler) still helps:
    # False drops such clients before training, as the EFL paper's FedAvg does.
    partial_work = False
    # Whether `aggregate` combines the client models through `average` (so that a robust
    # rule, aggregation.robust, applies); False for rules of their own (FedNova, FedCat).
    robust_aggregation = True
    # What differential privacy (privacy=...) must know of the rule, each a phrase for the
    # refusal or None: what its training messages carry besides the model and the config,
    # what its replies carry besides the model, the model its clients start from if not the
    # global one, and how it weighs clients if not by data size (which DP makes uniform).
    extra_down: ClassVar[str | None] = None
    extra_up: ClassVar[str | None] = None
    own_start: ClassVar[str | None] = None
    weighting: ClassVar[str | None] = "a rule of its own"
    # What it decides from the clients' un-noised updates (weights, expulsions), which central
    # DP's noise does not cover: such a rule runs only under privacy=local.
    decides_from_updates: ClassVar[str | None] = None
    # Why it cannot run task=regression (its rule needs class labels or the cross-entropy).
    classification_only: ClassVar[str | None] = None
    refused_addons: ClassVar[tuple[Refusal, ...]] = ()  # add-ons it cannot take, and why
    # What one of its clients' local steps costs against plain SGD's (one forward and backward
    # on a batch): the virtual clock (system=...) charges its steps that much compute.
    step_cost: ClassVar[float] = 1.0

    def __init__(
        self, *, settings: Mapping[str, Any] | None = None, **common: Unpack[Common]
    ) -> None:
        """`settings`: the subclass's own arguments, by config key (None: the default)."""
        cfg = bind_experiment(type(self), common, settings or {})
        addons = common.get("addons")
        self.addons = list(build_server_addons(cfg) if addons is None else addons)
        check_refusals(self.addons, self.refused_addons, str(cfg.algorithm.name))
        self.robust, self.norm_ratio, self.examples_ratio = build_aggregation(
            cfg, rule_of_its_own=not self.robust_aggregation
        )
        self.experiment = cfg
        privacy.install()  # DP noise from OS entropy; Flower's wrappers check what they wrap
        if privacy.mode(cfg) != "none":
            privacy.check_composition(cfg, self, privacy.mode(cfg))
        # Under central DP (privacy=central_*/client_*) the noise is calibrated to the plain
        # mean of the clipped updates: FedAvg's family averages uniformly there
        self.uniform_weights = (
            OmegaConf.select(cfg, "privacy.server") is not None
            and self.weighting_under_privacy() is None
        )
        self.federation = Federation(cfg, on_join=self.on_handshake, step_cost=self.step_cost)
        self.last_round: RoundRecord | None = None
        self._open: _OpenRound | None = None
        self._evaluating: tuple[list[Message], int] = ([], 0)
        self._numpy_cache: tuple[ArrayRecord, list[np.ndarray]] | None = (
            None  # plan.arrays as numpy
        )

    # ----- Flower's Strategy ---------------------------------------------------------------
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        """Plan the round, run the exchanges before training, return the training messages."""
        privacy.wrappers.required_wrapper(self.experiment, self)
        fed = self.federation
        plan, chosen = fed.plan(
            grid,
            server_round,
            arrays,
            config,
            excluded=self.excluded(),
            choose=self.choose,
            partial_work=self.partial_work,
        )
        opened = self._open = _OpenRound(plan, chosen, grid)
        if not plan.nodes and (fed.stragglers is not None or fed.clock is not None):
            log.warning("round %d: every sampled client is inactive or dropped", server_round)
            return []
        steps = self.round(plan)
        try:
            step = next(steps)
            while not _is_training(step):
                step = steps.send(self._exchange(opened, step))
        except StopIteration as done:
            opened.result = done.value
            return []
        opened.steps, opened.sent = steps, step.messages
        return fed.outgoing(step.messages, plan.nodes, plan.arrays)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Screen and aggregate the training replies: the new global model and the round's
        numeric metrics (the whole record, strings included, is `last_round`)."""
        opened, self._open = self._open, None
        if opened is None or opened.plan.round != server_round:
            raise RuntimeError(f"aggregate_train({server_round}) without its configure_train")
        fed = self.federation
        plan = opened.plan
        result = opened.result
        if opened.steps is not None:
            replies = list(replies)
            opened.updates.add(fed.received(opened.sent, replies))
            replies = fed.finished(plan, replies)
            opened.replies.extend(replies)
            try:
                step = opened.steps.send(replies)
                while True:  # exchanges after training, if a round has any
                    step = opened.steps.send(self._exchange(opened, step))
            except StopIteration as done:
                result = done.value
        idle = result is None
        if result is None:  # nobody could work this round: the model stays as it is
            result = RoundResult(None, dict(plan.metrics), [], 0)
        idle = fed.close_round(server_round, result) or idle
        new_arrays, broadcast = None, {}
        if result.arrays is not None:
            new_arrays, broadcast = fed.commit(result.arrays, server_round)
        self.last_round = RoundRecord(
            plan=plan,
            chosen=opened.chosen,
            result=result,
            arrays=new_arrays,
            replies=opened.replies,
            updates=opened.updates,
            broadcast=broadcast,
            idle=idle,
        )
        metrics = privacy.published_row({**result.metrics, **broadcast}, self.experiment)
        return new_arrays, numeric_metrics(metrics)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        """Per-client evaluation of the global model when `client_eval` is due, else none."""
        messages, nodes = self.federation.evaluate_messages(grid, server_round, arrays)
        self._evaluating = (messages, len(nodes))
        return messages

    def aggregate_evaluate(
        self, server_round: int, replies: Iterable[Message]
    ) -> MetricRecord | None:
        """The clients' mean and worst-decile accuracy of the global model."""
        fed = self.federation
        (sent, asked), self._evaluating = self._evaluating, ([], 0)
        if fed.client_eval is None or not sent:
            return None
        replies = list(replies)
        fed.received(sent, replies)
        columns = fed.client_eval.global_columns(server_round, replies, asked)
        return numeric_metrics(privacy.published_row(columns, self.experiment))

    def summary(self) -> None:
        """Log what runs: the rule, its add-ons and the experiment's data."""
        cfg = self.experiment
        log.info("\t├──> %s", type(self).__name__)
        for addon in self.addons:
            log.info("\t├──> add-on %s", type(addon).__name__)
        log.info(
            "\t└──> %s on %s, %d clients",
            cfg.algorithm.name,
            cfg.dataset.name,
            int(cfg.num_clients),
        )

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

    def weighting_under_privacy(self) -> str | None:
        """How this run weighs clients if not uniformly under DP (None: uniformly)."""
        for addon in self.addons:
            if addon.weighting is not None:
                return addon.weighting
        return self.weighting

    def connect(self, grid: Grid, **kwargs: object) -> None:
        """Wait for the clients the first round needs (`configure_train` does it too)."""
        self.federation.connect(grid, **kwargs)  # type: ignore[arg-type]

    def _exchange(self, opened: _OpenRound, step: Exchange) -> list[Message]:
        """Send one exchange of the round over the grid; its replies, made whole."""
        fed = self.federation
        plan = opened.plan
        outgoing = fed.outgoing(step.messages, plan.nodes, plan.arrays)
        replies = fed.courier.send(opened.grid, outgoing, step.label).replies
        opened.updates.add(fed.received(step.messages, replies))
        opened.replies.extend(replies)
        return replies

    def on_handshake(self, partition_id: int, metrics: MetricRecord) -> None:
        """What a node told the server when it joined; the add-ons take note."""
        for addon in self.addons:
            addon.on_join(partition_id, metrics)

    def excluded(self) -> frozenset[int]:
        """Partitions the driver must not sample any more (TACO's expelled freeloaders)."""
        return frozenset()

    def choose(self, server_round: int, available: Sequence[int]) -> list[int] | None:
        """The partitions to train this round, from the connected ones; None leaves the
        choice to the driver's seeded sampling (FedCat picks its own devices)."""
        return None

    # ----- the round -----------------------------------------------------------------------
    def round(self, plan: RoundPlan) -> RoundSteps:
        """The add-ons' exchanges, then one training exchange, then the aggregate."""
        for addon in self.addons:
            plan = yield from addon.prepare(plan)
        replies = yield Exchange(self.train_messages(plan), label="train")
        return self.finish_round(plan, replies)

    # ----- sending -------------------------------------------------------------------------
    def train_messages(self, plan: RoundPlan) -> list[Message]:
        """One training message per node of the plan."""
        return [
            Message(
                content=self.node_content(plan, partition_id),
                dst_node_id=node_id,
                message_type=MessageType.TRAIN,
            )
            for node_id, partition_id in plan.nodes.items()
        ]

    def node_content(self, plan: RoundPlan, partition_id: int) -> RecordDict:
        """What one node receives: the global model and the round's config, with the add-ons'
        values and this partition's own settings."""
        extra = {k: v for addon in self.addons for k, v in addon.shared_config().items()}
        extra.update(plan.node_config.get(partition_id, {}))
        config = ConfigRecord({**plan.config, **extra}) if extra else plan.config
        return RecordDict({protocol.ARRAYS: plan.arrays, protocol.CONFIG: config})

    # ----- receiving -----------------------------------------------------------------------
    def finish_round(self, plan: RoundPlan, replies: Sequence[Message]) -> RoundResult:
        """Validate the training replies and aggregate the usable ones."""
        unpacked, failures = unpack_replies(replies, plan.arrays)
        ok, norms = [], []
        for reply, norm in self.screen(plan, unpacked, failures):
            problem = self.reject(reply)
            if problem is None:
                ok.append(reply)
                norms.append(norm)
            else:
                failures.append(ClientFailure(reply.node_id, problem))
        for failure in failures:
            partition = plan.nodes.get(failure.node_id)
            held = "" if partition is None else f" (partition {partition})"
            log.warning(
                "round %d: node %d%s dropped: %s", plan.round, failure.node_id, held, failure.reason
            )
        failures = [*plan.failures, *failures]
        if not ok:
            return RoundResult(None, dict(plan.metrics), failures, 0)
        weights = self.aggregation_weights(plan, ok)
        new_arrays = self.aggregate(plan, ok, weights)
        seconds = [
            float(r.metrics[protocol.COMPUTE_SECONDS])
            for r in ok
            if protocol.COMPUTE_SECONDS in r.metrics
        ]
        metrics = {
            "train_loss": reply_mean(ok, protocol.TRAIN_LOSS),
            # local training time: the slowest client sets the round's pace (TACO spec 5)
            "compute_seconds_max": max(seconds, default=float("nan")),
            "compute_seconds_total": sum(seconds),
            # the largest and median update (reply minus the model sent): what clipping bounds
            "update_norm_max": max(norms),
            "update_norm_median": float(np.median(norms)),
            **self.weight_columns(ok, weights),
            **plan.metrics,
            **self.round_metrics(plan, ok, weights),
        }
        return RoundResult(arrays_like(plan.arrays, new_arrays), metrics, failures, len(ok))

    def screen(
        self, plan: RoundPlan, replies: list[ClientReply], failures: list[ClientFailure]
    ) -> list[tuple[ClientReply, float]]:
        """The replies whose update norm and claimed example count are within
        aggregation.norm_ratio / examples_ratio x the round's median, with their update norms;
        the others go to `failures` with the figures."""
        norms = [update_norm(r.arrays, self.reference(plan, r.partition_id, r)) for r in replies]
        kept, refused = screen_replies(replies, norms, self.norm_ratio, self.examples_ratio)
        failures.extend(refused)
        return kept

    def reference(self, plan: RoundPlan, partition_id: int, reply: ClientReply) -> list[np.ndarray]:
        """The model this partition started from (its update is its reply minus this); zeros
        when the round sent no model (strategy tests on bare replies)."""
        if not plan.arrays:
            return [np.zeros_like(w) for w in reply.arrays]
        return self.as_numpy(plan.arrays)

    def as_numpy(self, arrays: ArrayRecord) -> list[np.ndarray]:
        """`arrays` as numpy layers, converted once however many replies ask."""
        if self._numpy_cache is None or self._numpy_cache[0] is not arrays:
            self._numpy_cache = (arrays, arrays.to_numpy_ndarrays())
        return self._numpy_cache[1]

    def average(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        """The replies' models combined with the p_k by the run's aggregation.robust rule
        (the weighted average by default)."""
        return self.robust.combine(
            [r.arrays for r in replies],
            [self.reference(plan, r.partition_id, r) for r in replies],
            weights,
        )

    def reject(self, reply: ClientReply) -> str | None:
        """Why this algorithm cannot use a well-formed reply (None: it can)."""
        return None

    def aggregate(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> list[np.ndarray]:
        """The new global model's layers from this round's usable replies and their p_k."""
        raise NotImplementedError

    def base_weights(self, plan: RoundPlan, replies: list[ClientReply]) -> list[float]:
        """The algorithm's own averaging weights (unnormalised): data size by default; `plan`
        holds the model the replies started from."""
        return [float(r.num_examples) for r in replies]

    def aggregation_weights(self, plan: RoundPlan, replies: list[ClientReply]) -> np.ndarray:
        """p_k, summing to one: an add-on's weighting if one is enabled, else `base_weights`.

        Every strategy averages with these, so a reweighting such as FedDisco's composes with
        all of them. They also go to metrics.csv as `weight_<partition>`.
        """
        if self.uniform_weights:
            return np.full(len(replies), 1.0 / len(replies))
        for addon in self.addons:
            p = addon.weights(replies)
            if p is not None:
                return p
        return normalized(self.base_weights(plan, replies))

    def weight_columns(self, replies: list[ClientReply], weights: np.ndarray) -> dict[str, float]:
        """p_k in metrics.csv as `weight_<partition>`."""
        return {f"weight_{r.partition_id}": float(w) for r, w in zip(replies, weights, strict=True)}

    def round_metrics(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> dict[str, float]:
        """Algorithm-specific scalars for this round's metrics row (none by default)."""
        return {}

    def summarize(self, rows: Sequence[Mapping[str, object]]) -> dict[str, object]:
        """The add-ons' entries for summary.json."""
        return {k: v for addon in self.addons for k, v in addon.summarize(rows).items()}

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> StrategyState:
        """Server-side state that must survive a restart (the add-ons', e.g. FedDisco's cache).

        Strategies with state of their own extend this dict: `{**super().state_dict(), ...}`.
        """
        state = {k: v for addon in self.addons for k, v in addon.state_dict().items()}
        state.update(self.federation.state_dict())
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore `state_dict()`; subclasses pop their own keys and pass the rest up."""
        claimed: set[str] = set()
        for addon in self.addons:
            mine = {k: v for k, v in state.items() if addon.owns(k)}
            addon.load_state_dict(mine)
            claimed.update(mine)
        mine = {k: v for k, v in state.items() if Federation.owns(k)}
        self.federation.load_state_dict(mine)
        claimed.update(mine)
        unknown = sorted(set(state) - claimed)
        if unknown:
            raise ValueError(f"{type(self).__name__} does not keep state {unknown}")


def numeric_metrics(metrics: Mapping[str, object]) -> MetricRecord:
    """The numbers among a round's metrics, as Flower's MetricRecord holds them."""
    return MetricRecord(
        {
            k: int(v) if isinstance(v, int | np.integer) else float(v)
            for k, v in metrics.items()
            if isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)
        }
    )


def _is_training(step: Exchange) -> bool:
    """The exchange Flower's loop sends: the first one of training messages."""
    return any(m.metadata.message_type == MessageType.TRAIN for m in step.messages) or (
        not step.messages and step.label == "train"
    )

"""The base every fl_system strategy builds on: a Flower `Strategy`, the adaptor between
Flower's five methods and the parts of a rule (`round_rule`, `screening`, `weighting`,
`privacy_policy`, `state`).

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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Unpack

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy
from omegaconf import OmegaConf

from fl_system import privacy
from fl_system.config.experiment import build_aggregation, build_server_addons
from fl_system.privacy.secagg import check_secagg
from fl_system.privacy.secagg import settings_of as secagg_settings
from server_app.addons import Refusal, check_refusals
from server_app.compression import UpdateTally
from server_app.exchange import QuickGrid
from server_app.federated.experiment_binding import Common, bind_experiment, check_arguments
from server_app.federated.privacy_policy import PrivacyPolicy
from server_app.federated.replies import ClientReply
from server_app.federated.round_rule import RoundRule
from server_app.federated.screening import ReplyScreening
from server_app.federated.state import CheckpointedState
from server_app.federated.weighting import Weighting
from server_app.federation import Federation
from server_app.rounds import (
    Exchange,
    RoundPlan,
    RoundRecord,
    RoundResult,
    RoundSteps,
    RunFailed,
)

log = logging.getLogger(__name__)


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


class FederatedStrategy(
    RoundRule, ReplyScreening, Weighting, PrivacyPolicy, CheckpointedState, Strategy
):
    """Flower's `Strategy` for every fl_system rule: it binds the experiment, builds the
    add-ons and the federation, and drives a round's exchanges between `configure_train` and
    `aggregate_train`.

    Subclasses implement `aggregate` (`RoundRule`), and may override `node_content` (what one
    node receives), `base_weights` (`Weighting`), `reject` (`ReplyScreening`) and
    `round_metrics`, or `round` itself for rounds of another shape. The experiment a strategy
    runs (`experiment_binding`) is what the clients learn at the handshake and where the
    add-ons and the aggregation guards come from.

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
    # Why it cannot run task=regression (its rule needs class labels or the cross-entropy).
    classification_only: ClassVar[str | None] = None
    refused_addons: ClassVar[tuple[Refusal, ...]] = ()  # add-ons it cannot take, and why
    # What one of its clients' local steps costs against plain SGD's (one forward and backward
    # on a batch): the virtual clock (system=...) charges its steps that much compute.
    step_cost: ClassVar[float] = 1.0
    # Set by the round that runs the training exchange as SecAgg+ (`TrainingRound`): under
    # secagg, `configure_train` serves no other loop, which would send the updates in the clear
    secure_training = False

    def __init__(
        self, *, settings: Mapping[str, Any] | None = None, **common: Unpack[Common]
    ) -> None:
        """`settings`: the subclass's own arguments, by config key (None: the default)."""
        check_arguments(type(self), common)
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
        check_secagg(cfg, self)  # fl-run's refusals, for a strategy of one's own app too
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

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        """Plan the round, run the exchanges before training, return the training messages."""
        privacy.wrappers.required_wrapper(self.experiment, self)
        if not self.secure_training and secagg_settings(self.experiment) is not None:
            raise RunFailed(
                f"secagg={self.experiment.secagg.name}: this loop would send every update in "
                "the clear (Flower's Strategy.start, a DP wrapper's start included); call the "
                "strategy's own start, which runs the training as SecAgg+"
            )
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

    def weights_before_training(self, reports: list[ClientReply]) -> np.ndarray:
        """p_k of the round's clients from what they reported before training (secure
        aggregation fixes each client's weight before it masks its update)."""
        assert self._open is not None, "configure_train comes first"
        return self.aggregation_weights(self._open.plan, reports)

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

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Flower's `Strategy.start`, its replies pulled as they arrive (`QuickGrid`): Flower's
        grid would wait 3 s between pulls. Under secagg=secaggplus each round's training runs
        as SecAgg+, as in fl-run's rounds (`server_app.secure_start`): Flower's loop would
        send every update in the clear. Under server-side DP the wrapper's `start` runs the
        rounds: this one refuses."""
        settings = secagg_settings(self.experiment)
        loop = (initial_arrays, num_rounds, timeout, train_config, evaluate_config, evaluate_fn)
        if settings is None:
            privacy.wrappers.refuse_own_start(self.experiment, self)
            return super().start(QuickGrid(grid), *loop)
        # imported here: it builds on this module (TrainingRound runs a FederatedStrategy)
        from server_app.secure_start import secure_start

        return secure_start(self, settings, grid, *loop)

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

"""Stragglers and drop-outs for every algorithm (EFL spec 5): each round's step budgets.

Each sampled client's budget s_k comes from (seed, round, partition) alone
(`fl_system.learning.stragglers.round_budget`), so every algorithm of a comparison meets the same
stragglers. Inactive clients (s_k = 0) get no message. Incomplete ones (0 < s_k < E) train
s_k steps (`train.local_steps` overridden in their message) if the strategy can use partial
work; otherwise they are dropped, as FedAvg drops them in the paper. The round's metrics
get every sampled client's `budget_<pid>` and the counts `inactive`, `incomplete` and
`dropped_incomplete`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from omegaconf import DictConfig

from fl_system.learning.stragglers import round_budget
from fl_system.messages import protocol
from server_app.rounds import RoundPlan


@dataclass(frozen=True)
class Stragglers:
    """Budgets drawn with the run's seed against the run's step budget E."""

    seed: int
    steps: int  # E: train.local_steps
    incomplete: float
    inactive: float

    def budget(self, draw: int, partition: int) -> int:
        """One client's steps for round (or asynchronous draw) `draw`: 0, 1..E-1 or E."""
        return round_budget(
            seed=self.seed,
            server_round=draw,
            partition=partition,
            steps=self.steps,
            incomplete=self.incomplete,
            inactive=self.inactive,
        )

    def apply(self, plan: RoundPlan, *, partial_work: bool) -> RoundPlan:
        """The plan with inactive clients removed and incomplete ones set to their budget
        (or removed, when the strategy cannot use partial work)."""
        budgets = {pid: self.budget(plan.round, pid) for pid in plan.nodes.values()}
        partial = {pid for pid, s in budgets.items() if 0 < s < self.steps}
        usable = {pid for pid, s in budgets.items() if s == self.steps or (s and partial_work)}
        node_config = {pid: dict(config) for pid, config in plan.node_config.items()}
        for pid in partial & usable:
            node_config.setdefault(pid, {})[protocol.LOCAL_STEPS] = budgets[pid]
        metrics = {
            **plan.metrics,
            "inactive": sum(s == 0 for s in budgets.values()),
            "incomplete": len(partial),
            "dropped_incomplete": len(partial - usable),
            **{f"budget_{pid}": s for pid, s in sorted(budgets.items())},
        }
        nodes = {node: pid for node, pid in plan.nodes.items() if pid in usable}
        return replace(plan, nodes=nodes, node_config=node_config, metrics=metrics)


def from_config(cfg: DictConfig) -> Stragglers | None:
    """`stragglers.*` of the run, or None when every client completes every round."""
    incomplete, inactive = float(cfg.stragglers.incomplete), float(cfg.stragglers.inactive)
    if incomplete == 0 and inactive == 0:
        return None
    return Stragglers(int(cfg.seed), int(cfg.train.local_steps), incomplete, inactive)

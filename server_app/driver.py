"""The round driver: our replacement for Flower's fixed `Strategy.start` loop.

It adds what a real run needs: seeded client sampling by partition id, central evaluation
every `eval_every` rounds, a run directory (config, metrics, summary, curve, checkpoint),
resume, a target-accuracy stop, byte counting and a progress line per round.

Each round it runs the strategy's `round(plan)` generator (`server_app.rounds`): every
exchange the strategy yields is sent with what is left of the round's one `round_timeout`,
and its bytes and seconds are counted under the exchange's label.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Message
from flwr.serverapp import Grid
from omegaconf import DictConfig, OmegaConf

from fl_system import protocol, run_log
from fl_system.checkpoint import (
    Checkpoint,
    check_same_experiment,
    load_checkpoint,
    save_checkpoint,
)
from fl_system.devices import resolve_device
from fl_system.evaluation import evaluate
from fl_system.experiment import (
    build_compression,
    build_model,
    build_strategy,
    config_to_json,
    load_dataset,
)
from fl_system.results import MetricsLog, plot_curve, summarize, write_summary
from fl_system.run_dir import RunPaths
from fl_system.seeding import derive_seed
from server_app import stragglers
from server_app.client_eval import ClientEvaluation
from server_app.compression import UpdateTally, expand_replies
from server_app.downlink import Downlink
from server_app.exchange import Traffic, exchange
from server_app.nodes import NodeRegistry
from server_app.rounds import RoundPlan, RoundResult, grouped_reasons
from server_app.strategies.base import FederatedStrategy

log = logging.getLogger(__name__)

REPLY_FRAMING_BYTES = 1 << 20  # a reply's metrics, extra records and Flower's framing


@dataclass
class _Tally:
    """What the exchanges of one label moved and took in a round."""

    bytes_up: int = 0
    bytes_down: int = 0
    seconds: float = 0.0
    updates: UpdateTally = field(default_factory=UpdateTally)  # compression.up, in bytes_up


class RunFailed(RuntimeError):
    """The federation cannot make progress (no client replied usefully)."""


def sample_partitions(cfg: DictConfig, server_round: int, available: list[int]) -> list[int]:
    """This round's participants: all, or `clients_per_round` drawn with a per-round seed."""
    k = cfg.clients_per_round
    if k is None or k >= len(available):
        return sorted(available)
    rng = np.random.default_rng(derive_seed(cfg.seed, server_round, 0x5A3))
    return sorted(int(p) for p in rng.choice(sorted(available), size=k, replace=False))


class RoundDriver:
    """Runs `cfg.num_rounds` rounds of `strategy` over the nodes of `grid`."""

    def __init__(self, grid: Grid, cfg: DictConfig) -> None:
        self.grid = grid
        self.cfg = cfg
        self.paths = RunPaths(Path(cfg.run_dir))
        self.strategy: FederatedStrategy = build_strategy(cfg)
        self.compression = build_compression(cfg)
        down = build_compression(cfg, "down")
        self.downlink = (
            Downlink(
                down,
                seed=int(cfg.seed),
                server_apply=str(
                    OmegaConf.select(cfg, "compression.server_apply") or "recommended"
                ),
            )
            if down is not None
            else None
        )
        self.stragglers = stragglers.from_config(cfg)
        self.client_eval = ClientEvaluation.from_config(cfg)
        self.device = resolve_device(cfg.server.device)
        self.metrics = MetricsLog(self.paths.metrics)
        self.nodes = NodeRegistry(
            grid,
            config_to_json(cfg),
            num_partitions=cfg.num_clients,
            on_join=self.strategy.on_handshake,
        )

    def run(self) -> dict:
        """All rounds; on failure, the reason goes to the run directory before raising."""
        try:
            return self._run()
        except (RunFailed, TimeoutError) as err:
            saved = self.metrics.rows()
            hint = (
                f"; rounds up to {saved[-1]['round']} are saved (resume=true continues)"
                if saved
                else ""
            )
            self.paths.failure.write_text(f"{err}{hint}\n")
            run_log.say(run_log.failed_line(f"{err}{hint}"))
            raise

    def _run(self) -> dict:
        cfg = self.cfg
        if cfg.server.torch_threads:
            torch.set_num_threads(int(cfg.server.torch_threads))
        data = load_dataset(cfg)
        model = build_model(cfg)
        arrays = ArrayRecord(model.state_dict())
        start_round, elapsed_before = 1, 0.0
        if cfg.resume:
            arrays, start_round, elapsed_before = self._restore(arrays)
        if self.downlink is not None:
            self.downlink.start(arrays)
        self.nodes.wait_for(
            cfg.num_clients if cfg.clients_per_round is None else cfg.clients_per_round,
            cfg.round_timeout,
            say=run_log.say,
        )
        started = time.monotonic()  # training time counts from round 1, the federation up
        last_eval: tuple[float, float] | None = None
        for rnd in range(start_round, cfg.num_rounds + 1):
            t0 = time.monotonic()
            arrays, row, scored = self._round(rnd, arrays)
            if rnd % cfg.eval_every == 0 or rnd == cfg.num_rounds:
                if scored is None:
                    scored = self.downlink.evaluated(arrays) if self.downlink else arrays
                model.load_state_dict(scored.to_torch_state_dict())
                last_eval = evaluate(model, data.x_test, data.y_test, device=self.device)
                row["test_accuracy"], row["test_loss"] = last_eval
            if self.client_eval is not None and self.client_eval.due(rnd):
                row.update(self._evaluate_on_clients(rnd, arrays))
            elapsed = elapsed_before + time.monotonic() - started
            row["wall_seconds"] = round(elapsed, 3)
            self.metrics.append(row)
            self._save(rnd, arrays, elapsed)
            run_log.say(
                run_log.round_line(
                    rnd,
                    cfg.num_rounds,
                    last_eval[0] if last_eval else None,
                    row.get("train_loss", float("nan")),
                    time.monotonic() - t0,
                    elapsed,
                )
            )
            target = cfg.target_accuracy
            if target is not None and row.get("test_accuracy", -1.0) >= target:
                run_log.say(f"target accuracy {target} reached at round {rnd}: stopping")
                break
        return self._finish()

    # ----- one round ---------------------------------------------------------------------
    def _round(self, rnd: int, arrays: ArrayRecord) -> tuple[ArrayRecord, dict, ArrayRecord | None]:
        """The new global model, the metrics row and the model to evaluate if not that one."""
        cfg = self.cfg
        nodes = self.nodes.refresh(timeout=cfg.round_timeout)
        node_of = {pid: node for node, pid in nodes.items()}
        excluded = self.strategy.excluded()
        if len(excluded) >= cfg.num_clients:
            raise RunFailed(
                f"round {rnd}: every client is expelled (partitions "
                f"{', '.join(map(str, sorted(excluded)))}); nothing is left to train"
            )
        available = sorted(p for p in node_of if p not in excluded)
        chosen = self.strategy.choose(rnd, available)
        if chosen is None:
            chosen = sample_partitions(cfg, rnd, available)
        scoring = self.client_eval.train_config(rnd) if self.client_eval is not None else {}
        plan = RoundPlan(
            round=rnd,
            arrays=arrays,
            config=ConfigRecord({protocol.SERVER_ROUND: rnd, **scoring}),
            nodes={node_of[pid]: pid for pid in chosen},
        )
        if self.stragglers is not None:
            plan = self.stragglers.apply(plan, partial_work=self.strategy.partial_work)
            if not plan.nodes:  # nobody can work this round: the model stays as it is
                log.warning("round %d: every sampled client is inactive or dropped", rnd)
                return arrays, {"round": rnd, "participants": 0, **plan.metrics}, None
        result, tallies, timed_out, replies = self._exchanges(plan)
        if result.arrays is None or result.participants < (cfg.min_clients or 1):
            reasons = grouped_reasons(result.failures)
            raise RunFailed(
                f"round {rnd}: {result.participants} usable replies of {len(chosen)} sent"
                + (f", {timed_out} timed out" if timed_out else "")
                + (f" ({reasons})" if reasons else "")
            )
        arrays = result.arrays
        broadcast: dict[str, int] = {}
        if self.downlink is not None:  # the new model as the clients will hold it
            arrays, size = self.downlink.commit(result.arrays, rnd)
            shapes = [held.shape for held in (self.downlink.held or {}).values()]
            broadcast = {
                "broadcast_bytes": size,  # spec 2.9's analytic bits of one broadcast beside it
                "broadcast_bits_naive": round(self.downlink.compression.analytic_bits(shapes)),
                "broadcast_bits_golomb": round(
                    self.downlink.compression.analytic_bits(shapes, golomb=True)
                ),
            }
        handshake_up, handshake_down = self.nodes.take_handshake_bytes()
        row: dict = {
            "round": rnd,
            "participants": result.participants,
            "failures": len(result.failures) + timed_out,
            "bytes_up": sum(t.bytes_up for t in tallies.values()) + handshake_up,
            "bytes_down": sum(t.bytes_down for t in tallies.values()) + handshake_down,
        }
        if self.compression is not None:  # what the encoded updates weighed of bytes_up
            row["update_bytes_up"] = sum(t.updates.update_bytes for t in tallies.values())
            row["update_bits_naive"] = round(sum(t.updates.bits_naive for t in tallies.values()))
            row["update_bits_golomb"] = round(sum(t.updates.bits_golomb for t in tallies.values()))
        if len(tallies) > 1:  # several exchanges: each one's traffic and time
            for label, t in tallies.items():
                row[f"bytes_up_{label}"] = t.bytes_up
                row[f"bytes_down_{label}"] = t.bytes_down
                row[f"seconds_{label}"] = round(t.seconds, 3)
        row.update(broadcast)
        if scoring:
            row.update(self.client_eval.local_columns(replies))
        row.update({k: v for k, v in result.metrics.items() if not isinstance(v, list)})
        return arrays, row, result.scored

    def _exchanges(
        self, plan: RoundPlan
    ) -> tuple[RoundResult, dict[str, _Tally], int, list[Message]]:
        """Run the strategy's round: its result, traffic per exchange label, nodes timed out,
        and every reply of the round."""
        deadline = time.monotonic() + self.cfg.round_timeout
        steps = self.strategy.round(plan)
        tallies: dict[str, _Tally] = {}
        timed_out = 0
        replies: list[Message] = []
        try:
            step = next(steps)
            while True:
                start = time.monotonic()
                traffic = self._send(
                    step.messages, plan.nodes, plan.arrays, max(deadline - start, 0.0)
                )
                answered = {r.metadata.src_node_id for r in traffic.replies}
                for m in step.messages:
                    if m.metadata.dst_node_id not in answered:
                        timed_out += 1
                        log.warning(
                            "round %d: node %d did not answer the '%s' exchange in time",
                            plan.round,
                            m.metadata.dst_node_id,
                            step.label,
                        )
                tally = tallies.setdefault(step.label, _Tally())
                if self.compression is not None:
                    tally.updates.add(
                        expand_replies(self.compression, step.messages, traffic.replies)
                    )
                tally.bytes_up += traffic.bytes_up
                tally.bytes_down += traffic.bytes_down
                tally.seconds += time.monotonic() - start
                replies.extend(traffic.replies)
                step = steps.send(traffic.replies)
        except StopIteration as done:
            return done.value, tallies, timed_out, replies

    def _evaluate_on_clients(self, rnd: int, arrays: ArrayRecord) -> dict:
        """client_eval: the global model scored on every connected client's test split."""

        assert self.client_eval is not None
        nodes = self.nodes.refresh(timeout=self.cfg.round_timeout)
        return self.client_eval.global_columns(
            rnd,
            arrays,
            nodes,
            lambda messages, to: self._send(messages, to, arrays, self.cfg.round_timeout),
        )

    def _send(
        self,
        messages: list[Message],
        nodes: dict[int, int],
        global_arrays: ArrayRecord,
        timeout: float,
    ) -> Traffic:
        """One exchange; under compression.down the global model travels as broadcasts and
        the clients that answered are known to hold it."""
        if self.downlink is not None:
            messages = self.downlink.outgoing(messages, nodes, global_arrays)
        traffic = exchange(
            self.grid, messages, timeout=timeout, max_reply_bytes=self._reply_limit(global_arrays)
        )
        if self.downlink is not None:
            self.downlink.confirm(traffic.replies)
        return traffic

    def _reply_limit(self, model: ArrayRecord) -> int | None:
        """aggregation.max_reply_ratio x the model's bytes, plus room for metrics and framing."""
        ratio = self.cfg.aggregation.max_reply_ratio
        if ratio is None:
            return None
        return int(ratio * sum(len(a.data) for a in model.values())) + REPLY_FRAMING_BYTES

    # ----- run directory -------------------------------------------------------------------
    def _restore(self, arrays: ArrayRecord) -> tuple[ArrayRecord, int, float]:
        ckpt = load_checkpoint(self.paths.checkpoint)
        check_same_experiment(ckpt.config, _plain(self.cfg))
        if list(ckpt.model) != list(arrays.keys()):
            raise RunFailed("checkpoint model layers do not match the configured model")
        state = ckpt.strategy_state
        restored = ArrayRecord({k: Array(v) for k, v in ckpt.model.items()})
        if self.downlink is not None:
            self.downlink.load_state_dict(
                {k: v for k, v in state.items() if Downlink.owns(k)}, restored
            )
        self.strategy.load_state_dict({k: v for k, v in state.items() if not Downlink.owns(k)})
        self.metrics.truncate_after(ckpt.round)
        run_log.say(f"resuming after round {ckpt.round} from {self.paths.checkpoint}")
        return restored, ckpt.round + 1, ckpt.elapsed_seconds

    def _save(self, rnd: int, arrays: ArrayRecord, elapsed: float) -> None:
        save_checkpoint(
            self.paths.checkpoint,
            Checkpoint(
                round=rnd,
                model=dict(zip(arrays.keys(), arrays.to_numpy_ndarrays(), strict=True)),
                strategy_state={
                    **self.strategy.state_dict(),
                    **(self.downlink.state_dict() if self.downlink is not None else {}),
                },
                elapsed_seconds=elapsed,
                config=_plain(self.cfg),
            ),
        )

    def _finish(self) -> dict:
        rows = self.metrics.rows()
        summary = summarize(rows, target_accuracy=self.cfg.target_accuracy)
        summary.update(self.strategy.summarize(rows))
        write_summary(self.paths.summary, summary)
        plot_curve(
            rows,
            self.paths.curve,
            title=f"{self.cfg.algorithm.name} on {self.cfg.dataset.name}",
        )
        run_log.say(run_log.summary_line(summary))
        run_log.say(
            f"done: final accuracy {summary['final_accuracy']}, best {summary['best_accuracy']}, "
            f"{summary['rounds']} rounds, run directory {self.paths.root}"
        )
        return summary


def _plain(cfg: DictConfig) -> dict:
    out = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(out, dict)
    return out

"""The round driver: our replacement for Flower's fixed `Strategy.start` loop.

It calls the strategy's Flower methods as `Strategy.start` does (each round's training and
its evaluation on the clients in `server_app.training_round`) and adds what a real
run needs around them: central evaluation every `eval_every` rounds, a run
directory (config, metrics, summary, curve, checkpoint), resume, a target-accuracy stop, a
failed run named with its reasons, byte counting and a progress line per round. Every
exchange of a round, the strategy's own and the training one, goes through the strategy's
courier (`server_app.exchange.Courier`) under one `round_timeout`, which counts bytes and
seconds per exchange label.
"""

from __future__ import annotations

import functools
import logging
import time
from pathlib import Path

import torch
from flwr.app import Array, ArrayRecord
from flwr.serverapp import Grid
from omegaconf import DictConfig, OmegaConf

from fl_system.config.experiment import build_strategy, central_test_set
from fl_system.heterogeneity import traces
from fl_system.learning import score
from fl_system.learning.devices import evaluation_threads, resolve_device
from fl_system.learning.evaluation import counts_for
from fl_system.learning.own_model import build_model
from fl_system.privacy.secagg import settings_of as secagg_settings
from fl_system.records import run_log
from fl_system.records.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from fl_system.records.results import (
    METRIC_COLUMNS,
    MetricsLog,
    plot_curve,
    summarize,
    write_summary,
    write_table,
)
from fl_system.records.run_dir import RunPaths
from fl_system.records.tracking import chosen
from fl_system.records.tracking.base import FAILED
from fl_system.records.tracking.session import TrackedRun
from server_app.federated.strategy import FederatedStrategy
from server_app.federation import Federation
from server_app.privacy import Privacy
from server_app.rounds import NodeRefused, RunFailed
from server_app.secure_exchange import SecureExchange
from server_app.training_round import TrainingRound

log = logging.getLogger(__name__)


class RoundDriver:
    """Runs `cfg.num_rounds` rounds of `strategy` over the nodes of `grid`."""

    def __init__(self, grid: Grid, cfg: DictConfig) -> None:
        self.grid = grid
        self.cfg = cfg
        self.paths = RunPaths(Path(cfg.run_dir))
        self.strategy: FederatedStrategy = build_strategy(cfg)
        self.unit = run_log.round_unit(cfg)  # what num_rounds counts, in the log's lines
        assert self.strategy.federation is not None
        self.federation: Federation = self.strategy.federation
        self.privacy = Privacy(self.strategy, cfg)
        settings = secagg_settings(cfg)
        secure = SecureExchange(settings) if settings is not None else None
        self.training = TrainingRound(
            self.strategy, self.privacy, secure, grid, min_clients=cfg.min_clients or 1
        )
        self.device = resolve_device(cfg.server.device)
        self.metrics = MetricsLog(
            self.paths.metrics,
            leading=list(self.privacy.published_row(dict.fromkeys(_leading_columns(cfg)))),
        )
        self.tracking: TrackedRun | None = None
        self.checkpoint_every = int(OmegaConf.select(cfg, "checkpoint.every", default=1))
        self.saved_round = 0  # the round of the last checkpoint: where resume=true continues

    @functools.cached_property
    def plain_cfg(self) -> dict:
        """The config every checkpoint carries (resume compares it), converted once."""
        return _plain(self.cfg)

    def run(self) -> dict:
        """All rounds; on failure, the reason goes to the run directory (and the trackers)
        before raising."""
        try:
            return self._run()
        except (RunFailed, TimeoutError) as err:
            if isinstance(err, NodeRefused):  # bad input on a node: fl-run exits 2
                self.paths.bad_input.touch()
            hint = (
                f"; rounds up to {self.saved_round} are saved (resume=true continues)"
                if self.saved_round
                else ""
            )
            self.paths.failure.write_text(f"{err}{hint}\n")
            run_log.say(run_log.failed_line(f"{err}{hint}"))
            if self.tracking is not None:
                self.tracking.fail(FAILED, f"{err}{hint}")
            raise
        except Exception as err:  # a defect: Flower shows the traceback, the trackers a line
            if self.tracking is not None:
                self.tracking.fail(FAILED, f"{type(err).__name__}: {err}")
            raise

    def _run(self) -> dict:
        cfg = self.cfg
        if cfg.server.torch_threads:
            torch.set_num_threads(int(cfg.server.torch_threads))
        if chosen(cfg):  # its process starts while the data loads and the federation connects
            self.tracking = TrackedRun(cfg, self.paths.root)
        if self.federation.clock is not None:  # what it drew, a device trace to replay
            profiles = self.federation.clock.system.profiles
            write_table(self.paths.system_profiles, traces.device_rows(profiles))
        model = build_model(cfg)
        arrays = ArrayRecord(model.state_dict())
        start_round, elapsed_before = 1, 0.0
        if cfg.resume:
            arrays, start_round, elapsed_before = self._restore(arrays)
            if self.tracking is not None:  # the saved rounds a tracker lacks
                self.tracking.catch_up(self.metrics.rows())
        self.strategy.connect(self.grid, say=run_log.say)
        # after the nodes connected: under normalize=federated their statistics normalise it
        test = central_test_set(self.federation.cfg)
        started = time.monotonic()  # training time counts from round 1, the federation up
        last_eval: tuple[float, float] | None = None
        ended = elapsed_before  # the training clock at the end of the previous round
        for rnd in range(start_round, cfg.num_rounds + 1):
            arrays, row, scored = self.training(rnd, arrays)
            if test is not None and (rnd % cfg.eval_every == 0 or rnd == cfg.num_rounds):
                if scored is None:  # the model clients hold (or, server_apply=full, its own)
                    scored = self.federation.scored(arrays)
                model.load_state_dict(scored.to_torch_state_dict())
                row.update(self._evaluate_centrally(model, *test))
            row.update(self.training.evaluate_on_clients(rnd, arrays))
            if score.accuracy(cfg) in row:
                last_eval = row[score.accuracy(cfg)], row.get(score.loss(cfg))
            elapsed = elapsed_before + time.monotonic() - started
            row["wall_seconds"] = round(elapsed, 3)
            row = self.privacy.published_row(row)
            target = cfg.target_accuracy
            reached = target is not None and score.reached(cfg, row.get(score.column(cfg)), target)
            saving = reached or rnd == cfg.num_rounds or rnd % self.checkpoint_every == 0
            self.metrics.append(row, durable=saving)  # on the disk before the checkpoint
            if saving:
                self._save(rnd, arrays, elapsed)
            if self.tracking is not None:  # a round is tracked once, a repeated one not again
                self.tracking.log_round(rnd, row)
            run_log.say(
                run_log.round_line(
                    rnd,
                    cfg.num_rounds,
                    last_eval[0] if last_eval else None,
                    row.get("train_loss"),
                    elapsed - ended,  # one clock: the rows' wall_seconds apart
                    elapsed,
                    self.unit,
                )
            )
            ended = elapsed
            if reached:
                run_log.say(
                    f"target {score.column(cfg)} {target} reached at {self.unit} {rnd}: stopping"
                )
                break
        return self._finish()

    def _evaluate_centrally(self, model: torch.nn.Module, x, y) -> dict[str, float]:
        """The test_* columns: the reported metrics of the model on the server's test data."""
        with evaluation_threads(self.cfg.server.torch_threads):
            metrics = counts_for(self.cfg, model, x, y, device=self.device).metrics()
        return {f"test_{k}": metrics[k] for k in score.reported(self.cfg) if k in metrics}

    # ----- run directory -------------------------------------------------------------------
    def _restore(self, arrays: ArrayRecord) -> tuple[ArrayRecord, int, float]:
        """The checkpoint's model, round and clock (fl-run's preflight has compared its config
        with this one, filling the settings it predates from conf/'s defaults)."""
        ckpt = load_checkpoint(self.paths.checkpoint)
        if list(ckpt.model) != list(arrays.keys()):
            raise RunFailed("checkpoint model layers do not match the configured model")
        restored = ArrayRecord({k: Array(v) for k, v in ckpt.model.items()})
        state = ckpt.strategy_state
        self.privacy.load_state_dict({k: v for k, v in state.items() if Privacy.owns(k)})
        self.strategy.load_state_dict({k: v for k, v in state.items() if not Privacy.owns(k)})
        self.metrics.truncate_after(ckpt.round)
        run_log.say(f"resuming after {self.unit} {ckpt.round} from {self.paths.checkpoint}")
        self.saved_round = ckpt.round
        return restored, ckpt.round + 1, ckpt.elapsed_seconds

    def _save(self, rnd: int, arrays: ArrayRecord, elapsed: float) -> None:
        save_checkpoint(
            self.paths.checkpoint,
            Checkpoint(
                round=rnd,
                model=dict(zip(arrays.keys(), arrays.to_numpy_ndarrays(), strict=True)),
                strategy_state={**self.strategy.state_dict(), **self.privacy.state_dict()},
                elapsed_seconds=elapsed,
                config=self.plain_cfg,
            ),
        )
        self.saved_round = rnd

    def _finish(self) -> dict:
        rows = self.metrics.rows()
        summary = _summary(self.cfg, rows, self.strategy, self.federation)
        summary = self.privacy.summary(summary)
        write_summary(self.paths.summary, summary)
        plot_curve(
            rows,
            self.paths.curve,
            title=f"{self.cfg.algorithm.name} on {self.cfg.dataset.name}",
        )
        if self.tracking is not None:
            paths = self.paths
            self.tracking.finish(summary, [paths.curve, paths.metrics, paths.summary, paths.config])
        run_log.say(run_log.summary_line(summary))
        run_log.say(run_log.done_line(summary, self.paths.root))
        return summary


def _summary(
    cfg: DictConfig, rows: list[dict], strategy: FederatedStrategy, federation: Federation
) -> dict:
    """summary.json's entries before privacy's: the run's, the strategy's, normalisation's."""
    summary = summarize(
        rows,
        target_accuracy=cfg.target_accuracy,
        accuracy=score.accuracy(cfg),
        score=score.column(cfg),
        lower_is_better=score.lower_is_better(cfg),
    )
    summary.update(strategy.summarize(rows))
    derived = federation.normalisation
    if derived is not None:  # dataset.normalize=federated: what the nodes' moments gave
        summary["normalisation"] = {
            "mean": derived.mean,
            "std": derived.std,
            "reply_bytes": {str(p): b for p, b in sorted(derived.reply_bytes.items())},
        }
    return summary


def _leading_columns(cfg: DictConfig) -> list[str]:
    """metrics.csv's first columns: the central evaluation's only where there is one."""
    federated = score.mode(cfg) == "federated"
    return [c for c in METRIC_COLUMNS if not (federated and c.startswith("test_"))]


def _plain(cfg: DictConfig) -> dict:
    out = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(out, dict)
    return out

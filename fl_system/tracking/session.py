"""One run's trackers: the round driver's side (`TrackedRun`) and fl-run's (`end_left_open`).

A tracker never costs the run: whatever it raises (a server that cannot be reached, a full
disk, a refused login) is one warning naming it, and the run goes on without it; the run
directory's own files are complete either way.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fl_system import run_log
from fl_system.compare.runs import flatten
from fl_system.config_nodes import build
from fl_system.tracking import chosen, record
from fl_system.tracking.base import FINISHED, RUNNING, RunInfo, Tracker, round_metrics
from fl_system.tracking.record import Entry

Say = Callable[[str], None]


def run_info(cfg: DictConfig, run_dir: Path) -> RunInfo:
    """The run as every tracker names and tags it."""
    config = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(config, dict)
    tags = {
        "algorithm": str(cfg.algorithm.name),
        "dataset": str(cfg.dataset.name),
        "partition": str(cfg.partition.name),
        "runtime": str(cfg.runtime.name),
        "seed": str(cfg.seed),
        "run_id": str(cfg.run_id),
    }
    commit = OmegaConf.select(cfg, "tracking.commit")
    if commit:
        tags["git_commit"] = str(commit)
    sweep = OmegaConf.select(cfg, "tracking.sweep")
    return RunInfo(
        run_id=str(cfg.run_id),
        name=run_dir.name,
        run_dir=run_dir,
        dataset=str(cfg.dataset.name),
        params=flatten(config),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        tags=tags,
        sweep=str(sweep) if sweep else None,
    )


def _error_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300]}" if text else type(err).__name__


class TrackedRun:
    """The chosen trackers of the run the driver is running, started (or, on resume,
    continued) when it is built, before round 1.

    Every tracker call runs on one thread of its own, in order: the driver hands a round over
    and goes on (the calls overlap the next round's waiting for clients), and `finish` and
    `fail` return once everything handed over is done. A round handed over but not yet logged
    when the process is killed is not in tracking.json, so a resumed run sends it.
    """

    def __init__(self, cfg: DictConfig, run_dir: Path, say: Say = run_log.say) -> None:
        self.run = run_info(cfg, run_dir)
        self.say = say
        self.trackers: dict[str, Tracker] = {}
        self.entries: dict[str, Entry] = record.load(run_dir) if cfg.resume else {}
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        threading.Thread(target=self._serve, name="tracking", daemon=True).start()
        self._submit(self._open, chosen(cfg))
        self.flush()  # the tracked runs exist (or their warnings are out) before round 1

    def catch_up(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """The saved rounds a tracker has not received (a run resumed after a stop between
        its checkpoint and its tracking, or a tracker added on resume)."""
        for row in rows:
            self.log_round(int(float(row["round"])), row)

    def log_round(self, rnd: int, row: Mapping[str, Any]) -> None:
        self._submit(self._log_round, rnd, round_metrics(row))

    def finish(self, summary: Mapping[str, Any], files: Sequence[Path]) -> None:
        """The summary, the run's files and FINISHED."""
        self._submit(self._finish, dict(summary), [f for f in files if f.exists()])
        self._end()

    def fail(self, status: str, error: str) -> None:
        """FAILED (or KILLED) with the error line; the files logged so far stay."""
        self._submit(self._fail, status, error)
        self._end()

    def flush(self) -> None:
        """Wait until every call handed over so far is done."""
        self._jobs.join()

    def _end(self) -> None:
        """Wait for the last calls, then let the thread go (a warm engine runs a sweep's
        members one after another in one process)."""
        self.flush()
        self._jobs.put(None)

    # ----- on the tracking thread --------------------------------------------------------
    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            try:
                job()
            finally:
                self._jobs.task_done()

    def _submit(self, action: Callable[..., None], *args: Any) -> None:
        self._jobs.put(functools.partial(action, *args))

    def _open(self, nodes: Mapping[str, DictConfig]) -> None:
        for name, node in nodes.items():
            self._guard(name, self._start, name, node)
        self._save()

    def _start(self, name: str, node: DictConfig) -> None:
        tracker = build(node, label=f"tracking={name}")
        tracker.name = name
        previous = self.entries.get(name)
        run_id = tracker.start(self.run, previous.id if previous else None)
        self.trackers[name] = tracker
        if previous is None or previous.id != run_id:
            self.entries[name] = Entry(run_id)
        else:
            previous.status = RUNNING

    def _log_round(self, rnd: int, metrics: Mapping[str, float]) -> None:
        for name, tracker in list(self.trackers.items()):
            owed = self.entries[name].round < rnd
            if owed and self._guard(name, tracker.log_round, rnd, metrics):
                self.entries[name].round = rnd
        self._save()

    def _finish(self, summary: Mapping[str, Any], files: list[Path]) -> None:
        last = max((e.round for e in self.entries.values()), default=0)
        for name, tracker in list(self.trackers.items()):
            if self._guard(name, _close, tracker, summary, last, files):
                self.entries[name].status = FINISHED
        self._save()

    def _fail(self, status: str, error: str) -> None:
        for name, tracker in list(self.trackers.items()):
            if self._guard(name, tracker.end, status, error):
                self.entries[name].status = status
        self._save()

    def _save(self) -> None:
        if self.entries:
            record.save(self.run.run_dir, self.entries)

    def _guard(self, name: str, action: Callable[..., None], *args: Any) -> bool:
        """`action(*args)`; False, with one warning and `name` dropped, if it raised."""
        try:
            action(*args)
            return True
        except Exception as err:  # any tracker failure: one warning, the run goes on
            self.trackers.pop(name, None)
            self.say(run_log.warning_line(_dropped(name, err)))
            return False


def _close(tracker: Tracker, summary: Mapping[str, Any], last: int, files: Sequence[Path]) -> None:
    tracker.log_summary(summary, last)
    tracker.log_files(list(files))
    tracker.end(FINISHED, None)


def _dropped(name: str, err: BaseException) -> str:
    return (
        f"tracking={name} failed ({_error_line(err)}); the run goes on without it, "
        "its files in the run directory are complete"
    )


def end_left_open(cfg: DictConfig, run_dir: Path, status: str, error: str, say: Say) -> None:
    """fl-run's last word on a run whose ServerApp stopped without closing its tracked runs
    (interrupted: KILLED; crashed: FAILED), saying what it does: importing a tracker's
    package and reaching its store takes seconds."""
    nodes = chosen(cfg)
    entries = record.load(run_dir)
    left = {n: e for n, e in entries.items() if e.status == RUNNING and n in nodes}
    if not left:
        return
    say(f"marking the run {status} in {', '.join(left)} (its processes are gone)")
    run = run_info(cfg, run_dir)
    for name, entry in left.items():
        try:
            tracker = build(nodes[name], label=f"tracking={name}")
            tracker.mark_ended(run, entry.id, status, error)
            entry.status = status
        except Exception as err:  # the tracker is unreachable now: say so, keep the exit
            say(f"warning: tracking={name}: cannot mark the run {status} ({_error_line(err)})")
    record.save(run_dir, entries)

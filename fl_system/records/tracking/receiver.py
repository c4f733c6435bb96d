"""The trackers of one run, in a process of their own (as NVFlare's receiver): `Receiver`
holds them and `serve` feeds it what the round driver sends.

A tracker never costs the run: whatever it raises (a server that cannot be reached, a full
disk, a refused login) is one warning naming it, and the run goes on without it; the run
directory's own files are complete either way. Its own process keeps the trackers' Python
work (an SQL store's writes, W&B's records) off the interpreter that routes the round's
messages: a thread there would take its turns at that interpreter's lock.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from fl_system.records import run_log
from fl_system.records.compare.runs import flatten
from fl_system.records.run_dir import RunPaths
from fl_system.records.tracking import chosen, record
from fl_system.records.tracking.base import FINISHED, KILLED, RUNNING, RunInfo, Tracker
from fl_system.records.tracking.final_model import FinalModel, final_model
from fl_system.records.tracking.record import Entry
from fl_system.settings.config_nodes import build

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
        name=str(OmegaConf.select(cfg, "tracking.label") or run_dir.name),
        run_dir=run_dir,
        dataset=str(cfg.dataset.name),
        params=flatten(config),
        config_yaml=OmegaConf.to_yaml(cfg, resolve=True),
        tags=tags,
        sweep=str(sweep) if sweep else None,
    )


def error_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300]}" if text else type(err).__name__


class Receiver:
    """The chosen trackers of one run, started (or, on resume, continued) when built; each
    call goes to every tracker still working, and tracking.json follows."""

    def __init__(self, cfg: DictConfig, run_dir: Path, at: float, say: Say = run_log.say) -> None:
        self.run = run_info(cfg, run_dir)
        self.cfg = cfg
        self.say = say
        self.trackers: dict[str, Tracker] = {}
        self.entries: dict[str, Entry] = record.load(run_dir) if cfg.resume else {}
        for name, node in chosen(cfg).items():
            self._guard(name, self._start, name, node, at)
        self._save()

    def log_round(self, rnd: int, metrics: Mapping[str, float], at: float) -> None:
        """A round (ended `at`), to each tracker that lacks it."""
        for name, tracker in list(self.trackers.items()):
            owed = self.entries[name].round < rnd
            if owed and self._guard(name, tracker.log_round, rnd, metrics, at):
                self.entries[name].round = rnd
        self._save()

    def finish(self, summary: Mapping[str, Any], files: list[str], at: float) -> None:
        last = max((e.round for e in self.entries.values()), default=0)
        paths = [Path(f) for f in files]
        keeping = any(t.keeps_models for t in self.trackers.values())
        model = self._final_model() if keeping else None
        for name, tracker in list(self.trackers.items()):
            if self._guard(name, _close, tracker, summary, last, paths, model, at):
                self.entries[name].status = FINISHED
        self._save()

    def fail(self, status: str, error: str, at: float) -> None:
        for name, tracker in list(self.trackers.items()):
            if self._guard(name, tracker.end, status, error, at):
                self.entries[name].status = status
        self._save()

    def _start(self, name: str, node: DictConfig, at: float) -> None:
        tracker = build(node, label=f"tracking={name}")
        previous = self.entries.get(name)
        run_id = tracker.start(self.run, previous.id if previous else None, at)
        self.trackers[name] = tracker
        if previous is None or previous.id != run_id:
            self.entries[name] = Entry(run_id)
        else:
            previous.status = RUNNING

    def _final_model(self) -> FinalModel | None:
        """The run's final model; a warning and None if it cannot be built (the run's own
        files are complete either way)."""
        try:
            return final_model(self.cfg, RunPaths(self.run.run_dir).checkpoint)
        except Exception as err:
            self.say(run_log.warning_line(f"the final model is not logged ({error_line(err)})"))
            return None

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
            self.say(run_log.warning_line(dropped(name, err)))
            return False


def _close(
    tracker: Tracker,
    summary: Mapping[str, Any],
    last: int,
    files: list[Path],
    model: FinalModel | None,
    at: float,
) -> None:
    tracker.log_summary(summary, last, at)
    tracker.log_files(files)
    if model is not None and tracker.keeps_models:
        tracker.log_model(model, at)
    tracker.end(FINISHED, None, at)


_GOES_ON = "the run goes on without it, its files in the run directory are complete"


def dropped(name: str, err: BaseException) -> str:
    return f"tracking={name} failed ({error_line(err)}); {_GOES_ON}"


def serve(conn: Connection) -> None:
    """The receiver process: ("open", config, run_dir, at) starts a run's trackers, then
    ("round", rnd, metrics, at), ("finish", summary, files, at) and ("fail", status, error,
    at) in order, `at` being when it happened in the run (time.time() of the driver);
    ("flush",) is answered once everything before it is done, ("end",) likewise and drops
    the run (the process stays for the next run of a warm engine's sweep). What the trackers
    have to say comes back as ("say", text). The pipe closing ends it: its driver's process
    ended, so a run still open was stopped hard and is closed as KILLED here, where the
    trackers hold what they were sent (fl-run marks it if this process is stopped first)."""
    receiver: Receiver | None = None

    def say(text: str) -> None:
        conn.send(("say", text))

    while True:
        try:
            kind, *args = conn.recv()
        except (EOFError, OSError):  # the driver's process ended mid-run (Ctrl-C, a crash)
            if receiver is not None:
                receiver.fail(KILLED, "its ServerApp process ended before the run did", time.time())
            return
        try:
            if kind == "open":
                receiver = Receiver(OmegaConf.create(args[0]), Path(args[1]), args[2], say=say)
            elif kind in ("flush", "end"):
                receiver = None if kind == "end" else receiver
                conn.send(("done",))
            elif receiver is not None:
                {"round": receiver.log_round, "finish": receiver.finish, "fail": receiver.fail}[
                    kind
                ](*args)
        except Exception as err:  # a defect here must not end the run either
            receiver = None
            say(run_log.warning_line(f"tracking stopped ({error_line(err)}); " + _GOES_ON))


def main() -> None:
    """`python -m fl_system.records.tracking.receiver FD`: serve the socket FD (started by
    `session.TrackedRun`, its stdout and stderr discarded: everything goes through FD)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the driver's end decides
    serve(Connection(int(sys.argv[1])))
    # Every run is closed; skip the exit hooks (W&B's would close a run again).
    os._exit(0)


if __name__ == "__main__":
    main()

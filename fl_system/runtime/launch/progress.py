"""Following a run from the launching process: a progress bar fed by the ServerApp's log."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Protocol

from omegaconf import DictConfig
from tqdm import tqdm

from fl_system.records.checkpoint import checkpoint_round
from fl_system.records.results import write_summary
from fl_system.records.run_dir import RunPaths
from fl_system.records.run_log import RunLog, round_unit
from fl_system.runtime import startup
from fl_system.runtime.launch import LaunchError
from fl_system.runtime.launch.processes import ProcessGroup

SUBMITTED = b"Successfully started run"  # what `flwr run` prints once the SuperLink has the run


def server_log(paths: RunPaths) -> Path:
    return paths.logs / "serverapp.log"


def log_end(paths: RunPaths) -> int:
    """Where this run's lines will start in the server log (call before starting the process
    that writes them): what is there already belongs to earlier runs of the directory."""
    try:
        return server_log(paths).stat().st_size
    except FileNotFoundError:
        return 0


class Ends(Protocol):
    """What a run's end is read from: a process, or a run on a warm engine."""

    def poll(self) -> int | None: ...


class ProgressBar:
    """Rounds done, latest accuracy and ETA, read from the ServerApp's log as it grows.

    The log (`logs/serverapp.log`) is local in every runtime, also when the ServerApp runs
    on another machine, which the run directory's files are not.
    """

    def __init__(self, cfg: DictConfig, paths: RunPaths, since: int) -> None:
        self.log_path = server_log(paths)
        self.log = RunLog()
        self._offset = since  # a resumed run's log holds the earlier runs' lines before it
        self.bar = tqdm(
            total=int(cfg.num_rounds),
            unit=round_unit(cfg),
            desc=f"{cfg.algorithm.name}/{cfg.dataset.name}",
            file=sys.stderr,
            dynamic_ncols=True,
            mininterval=0.5,
        )
        self.started = False
        self._warned = 0  # warnings of the log written to the console so far

    def poll(self) -> None:
        try:
            with self.log_path.open("rb") as f:
                f.seek(self._offset)
                chunk = f.read()
        except FileNotFoundError:
            return
        self._offset += len(chunk)
        if SUBMITTED in chunk:
            startup.mark("run submitted")
        self.log.feed(chunk.decode(errors="replace"))
        while self._warned < len(self.log.warnings):
            self.bar.write(f"fl-run: warning: {self.log.warnings[self._warned]}", file=sys.stderr)
            self._warned += 1
        done = self.log.round
        if done == 0:
            return
        if not self.started:  # a resumed run starts part-way
            startup.mark("first round done")
            self.bar.n = self.bar.last_print_n = self.bar.initial = done - 1
            # the bar's clock is training time, as in the log and metrics.csv: start-up and
            # waiting for the federation are not rounds
            self.bar.start_t = time.time() - (self.log.round_seconds or 0.0)
            self.bar.last_print_t = self.bar.start_t  # its rate counts from there too
            self.started = True
        if self.log.accuracy is not None:
            self.bar.set_postfix_str(f"acc {self.log.accuracy:.4f}", refresh=False)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.poll()
        self.log.feed("\n")  # a last line without its newline
        self.bar.close()


def follow_run(
    cfg: DictConfig,
    paths: RunPaths,
    main: Ends,
    procs: ProcessGroup,
    *,
    since: int,
    end_at_done: bool = True,
    poll: float = 0.2,
) -> None:
    """Wait for `main` (the process whose end is the run's end) or, with `end_at_done`, the
    ServerApp's last line, showing progress.

    A restartable process that exits (a killed SuperNode) is started again and the run goes
    on; any other process of the group dying early (the SuperLink, a SuperNode that keeps
    failing) ends the wait. Raises with the failure the ServerApp reported, or the log's tail
    if the run left no summary. A summary that exists only in the log (the ServerApp wrote
    its run directory on another machine) is copied into the local run directory.
    """
    bar = ProgressBar(cfg, paths, since)
    try:
        # The ServerApp's last line ends the wait (`end_at_done`): what comes after it
        # (Flower's own shutdown, `flwr run` noticing the run ended) adds seconds and writes
        # nothing. The simulation engine instead ends by itself, shutting Ray down cleanly.
        while main.poll() is None and not (end_at_done and bar.log.done):
            bar.poll()
            procs.watch()
            for name, code in procs.restart_exited():
                bar.bar.write(
                    f"fl-run: {name} exited with code {code}; started again (same partition "
                    "and state); the round goes on without it"
                )
            dead = procs.first_dead()
            if dead and dead[1] is not main:
                raise _exited(dead, paths)
            time.sleep(poll)
        if main.poll() is not None and isinstance(main, subprocess.Popen):
            procs.drain(main)
    finally:
        bar.close()
    if bar.log.failure is not None:
        raise LaunchError(bar.log.failure)
    if bar.log.summary is not None and not paths.summary.exists():
        write_summary(paths.summary, bar.log.summary)  # the ServerApp ran on another machine
    dead = procs.first_dead(restartable=False)
    if not paths.summary.exists() and dead and dead[1] is not main:
        # `flwr run` ends as soon as its SuperLink does: name the cause, not the symptom
        raise _exited(dead, paths)
    if not paths.summary.exists():
        raise LaunchError(
            "the run ended without a summary; last lines of the server log:\n"
            + log_tail(paths.logs / "serverapp.log")
        )


def _exited(dead: tuple[str, subprocess.Popen, int], paths: RunPaths) -> LaunchError:
    name, _, code = dead
    message = f"{name} exited with code {code}; see {paths.logs}"
    saved = saved_rounds(paths)
    if saved:  # a dead SuperLink loses nothing it checkpointed: say how to go on
        message += f"; {resume_hint(saved, paths.root)}"
    return LaunchError(message)


def saved_rounds(paths: RunPaths) -> int | None:
    """The round of the run's checkpoint, where resume=true continues (with
    checkpoint.every > 1 metrics.csv may hold later rows, which resume runs again)."""
    return checkpoint_round(paths.checkpoint)


def resume_hint(saved: int | None, run_dir: Path) -> str:
    """What a run that ended early kept, and the command that continues it."""
    kept = (
        f"rounds up to {saved} are saved"
        if saved
        else "its run directory keeps the rounds it finished"
    )
    return (
        f"{kept}. Continue it with fl-run <the same overrides> resume=true hydra.run.dir={run_dir}"
    )


def log_tail(path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join("    " + line for line in text[-lines:])

"""Following a run from the launching process: a progress bar fed by the run's metrics.csv."""

from __future__ import annotations

import subprocess
import sys
import time

from omegaconf import DictConfig
from tqdm import tqdm

from fl_system.launch import LaunchError
from fl_system.launch.processes import ProcessGroup
from fl_system.results import MetricsLog
from fl_system.run_dir import RunPaths


class ProgressBar:
    """Rounds done, latest accuracy and ETA, read from metrics.csv as the server writes it."""

    def __init__(self, cfg: DictConfig, paths: RunPaths) -> None:
        self.paths = paths
        self.bar = tqdm(
            total=int(cfg.num_rounds),
            unit="round",
            desc=f"{cfg.algorithm.name}/{cfg.dataset.name}",
            file=sys.stderr,
            dynamic_ncols=True,
            mininterval=0.5,
        )
        self.started = False

    def poll(self) -> None:
        if not self.paths.metrics.exists():
            return
        rows = MetricsLog(self.paths.metrics).rows()
        if not rows:
            return
        done = int(rows[-1]["round"])
        if not self.started:  # a resumed run starts part-way
            self.bar.n = self.bar.last_print_n = done - 1
            self.started = True
        accs = [r["test_accuracy"] for r in rows if r.get("test_accuracy")]
        if accs:
            self.bar.set_postfix_str(f"acc {float(accs[-1]):.4f}", refresh=False)
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        self.poll()
        self.bar.close()


def follow_run(
    cfg: DictConfig,
    paths: RunPaths,
    main: subprocess.Popen,
    procs: ProcessGroup,
    *,
    poll: float = 0.5,
) -> None:
    """Wait for `main` (the process whose end is the run's end), showing progress.

    Any other process of the group dying early (a SuperLink or SuperNode crash) ends the
    wait too. Raises with the log's tail if the run left no summary.
    """
    bar = ProgressBar(cfg, paths)
    try:
        while main.poll() is None:
            bar.poll()
            dead = procs.first_dead()
            if dead and dead[1] is not main:
                raise LaunchError(f"{dead[0]} exited with code {dead[2]}; see {paths.logs}")
            time.sleep(poll)
    finally:
        bar.close()
    if paths.failure.exists():
        raise LaunchError(paths.failure.read_text().strip())
    if not paths.summary.exists():
        raise LaunchError(
            "the run ended without a summary; last lines of the server log:\n"
            + log_tail(paths.logs / "serverapp.log")
        )


def log_tail(path, lines: int = 15) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"(no log at {path})"
    return "\n".join("    " + line for line in text[-lines:])

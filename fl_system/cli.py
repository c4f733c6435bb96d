"""`fl-run`: compose an experiment with Hydra, check it, start the chosen runtime."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from fl_system.config.compose import CONF_DIR, prepare
from fl_system.config.overrides import (
    check_choices,
    check_keys,
    check_syntax,
    mounted_groups,
    rewrite,
)
from fl_system.config.validation import check_values
from fl_system.data import DataError, PartitionError
from fl_system.learning.app_supplied import refuse_in_fl_run
from fl_system.records import run_log, tracking
from fl_system.records.checkpoint import CheckpointError
from fl_system.records.run_dir import RunPaths
from fl_system.runtime import startup
from fl_system.runtime.launch import LaunchError, StartsEarly, release_warm
from fl_system.runtime.launch.engine_forks import start_early
from fl_system.settings.config_nodes import build, new_run_id
from fl_system.settings.value_checks import ConfigError

EXIT_BAD_INPUT = 2
EXIT_RUN_FAILED = 1
PREFLIGHT = "fl_system.config.preflight"  # the checks of the parts and the data


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C so every runtime tears its processes down."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def run_experiment(cfg: DictConfig) -> dict:
    """Check the config, run it, return the summary."""
    startup.begin()
    startup.mark("composed")
    paths = RunPaths(Path(HydraConfig.get().runtime.output_dir).resolve())
    with open_dict(cfg):
        cfg.run_dir = str(paths.root)
    prepare(cfg, new_run_id())  # preflight puts the checkpoint's run id back when resuming
    hydra_cfg = HydraConfig.get()
    sweep = Path(hydra_cfg.sweep.dir) if hydra_cfg.mode == RunMode.MULTIRUN else None
    tracking.settle(
        cfg, started_in=Path.cwd(), sweep=sweep, job_overrides=list(hydra_cfg.overrides.task)
    )
    early = None
    try:
        check_values(cfg)  # a bad value never starts a process
        refuse_in_fl_run(cfg)
        runtime = build(cfg.runtime)
        startup.mark("values checked")
        # The runtime starts early to overlap the import of the parts' checks (torch comes
        # with them: ~1.3 s of CPU). Imported already (a sweep's later member, an fl-run
        # forked warm), they run first: a bad part then starts no process.
        imported = PREFLIGHT in sys.modules
        if imported:
            _check_parts(cfg)
        if isinstance(runtime, StartsEarly) and not cfg.resume and _fresh(paths.root):
            early = runtime  # its processes start while the parts and the data are checked
            early.start(cfg, paths)
        if not imported:
            _check_parts(cfg)
        startup.mark("config checked")
        from fl_system.config.preflight import check_data

        check_data(cfg, paths)
    except (ConfigError, DataError, PartitionError, CheckpointError, LaunchError) as err:
        _stop_unused(early, paths.root)
        _fail(str(err), EXIT_BAD_INPUT)
    except ValueError as err:  # a component rejected its own arguments
        _stop_unused(early, paths.root)
        _fail(f"invalid configuration: {err}", EXIT_BAD_INPUT)
    except BaseException:  # Ctrl-C while checking: nothing may outlive fl-run
        if early is not None:
            early.stop()
        raise
    startup.mark("data checked")
    paths.root.mkdir(parents=True, exist_ok=True)
    paths.config.write_text(OmegaConf.to_yaml(cfg))
    paths.summary.unlink(missing_ok=True)
    paths.failure.unlink(missing_ok=True)
    paths.bad_input.unlink(missing_ok=True)
    try:
        runtime.run(cfg, paths)
    except LaunchError as err:
        _end_tracked(cfg, paths, "failed", str(err).splitlines()[0] if str(err) else "failed")
        code = EXIT_BAD_INPUT if paths.bad_input.exists() else EXIT_RUN_FAILED
        _fail(f"{err}\nrun directory: {paths.root}", code)
    except KeyboardInterrupt as stop:
        how = "terminated" if isinstance(stop, Terminated) else "interrupted"
        _end_tracked(cfg, paths, "killed", how)
        raise
    finally:
        startup.write(paths.startup)
    summary = json.loads(paths.summary.read_text())
    judged = (
        f"final {summary['score']} {_fmt(summary['final_score'])} "
        f"(best {_fmt(summary['best_score'])}), "
        if "score" in summary
        else ""
    )
    virtual = summary.get("virtual_clock")
    clocked = f"{_seconds(virtual)} virtual s (system=...), " if virtual is not None else ""
    looks = "".join(f"\n{line}" for line in tracking.where_to_look(cfg, paths.root))
    print(
        f"{judged}final accuracy {_fmt(summary['final_accuracy'])} "
        f"(best {_fmt(summary['best_accuracy'])}) after "
        f"{run_log.how_many(summary['rounds'], summary.get('round_unit', 'round'))}: "
        f"{summary['wall_seconds']:.1f} s training, {clocked}"
        f"{startup.elapsed():.1f} s in all (start-up included)\n"
        f"run directory: {paths.root}{looks}",
        flush=True,
    )
    return summary


def _seconds(value: float) -> str:
    """Seconds with three significant digits at least (a virtual round may last ms)."""
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3g}"


def _end_tracked(cfg: DictConfig, paths: RunPaths, status: str, error: str) -> None:
    """Close the tracked runs a stopped or crashed ServerApp left open (every process of
    the run is gone by now); untracked runs import nothing."""
    if not tracking.chosen(cfg):
        return
    from fl_system.records.tracking.session import end_left_open

    end_left_open(
        cfg, paths.root, status, error, say=lambda text: print(f"fl-run: {text}", file=sys.stderr)
    )


def _fresh(root: Path, ours: frozenset[str] = frozenset({".hydra"})) -> bool:
    """Nothing in the run directory but `ours` (by default what Hydra put there for it)."""
    return not root.is_dir() or not {p.name for p in root.iterdir()} - ours


def _check_parts(cfg: DictConfig) -> None:
    """preflight's `check_parts`, imported only now (torch comes with it)."""
    from fl_system.config.preflight import check_parts

    check_parts(cfg)


def _stop_unused(early: StartsEarly | None, root: Path) -> None:
    """A run that failed validation leaves nothing behind: Hydra made its directory (and
    `.hydra` in it) before any check ran, and a runtime started early wrote its logs there.
    Stop that runtime and remove the directory if that is all it holds, and the parents
    Hydra made for it (outputs/<date>) while they are empty and inside the working folder."""
    ours = frozenset({".hydra"})
    if early is not None:
        early.stop()
        ours |= {"logs"}  # the directory was fresh: these logs are this run's
    if not root.is_dir() or not _fresh(root, ours):
        return
    shutil.rmtree(root)
    here = Path.cwd().resolve()
    for parent in root.parents:
        if parent == here or here not in parent.parents:
            break
        try:
            parent.rmdir()
        except OSError:  # not empty: other runs live there
            break


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.4f}"


def _fail(message: str, code: int) -> None:
    print(f"fl-run: error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    run_experiment(cfg)


def main() -> None:
    signal.signal(signal.SIGTERM, _on_sigterm)
    # Ctrl-C stops the run even when fl-run was started from a background job, whose
    # SIGINT the shell ignores (and Python then leaves ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    start_early(sys.argv[1:])  # the simulation engine imports while the config is composed
    try:
        _checked_arguments()
        _hydra_main()
    except KeyboardInterrupt as stop:
        name = "terminated" if isinstance(stop, Terminated) else "interrupted"
        done = stop.args[0] if stop.args else "every process of the run was stopped"
        print(f"fl-run: {name}; {done}", file=sys.stderr)
        sys.exit(143 if isinstance(stop, Terminated) else 130)
    finally:
        release_warm()  # a sweep's warm engine, an early engine no run took
    # Every file is written and every process of the run is gone: the interpreter's own
    # teardown (torch's exit hooks, finalising thousands of modules) would add about 1 s.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _checked_arguments() -> None:
    """Check and rewrite fl-run's arguments before Hydra reads them (exit 2 if bad)."""
    try:
        check_syntax(sys.argv[1:])
        check_choices(sys.argv[1:], CONF_DIR)
        sys.argv[1:] = rewrite(sys.argv[1:], mounted_groups(CONF_DIR), CONF_DIR)
        if not any(a.startswith("-") for a in sys.argv[1:]):  # one run: compose it here first
            check_keys(sys.argv[1:], CONF_DIR)
    except ValueError as err:
        _fail(str(err), EXIT_BAD_INPUT)


if __name__ == "__main__":
    main()

"""Submitting a run with `flwr run`: connection file, run config file, app directory."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import tomli_w
from omegaconf import DictConfig

from fl_system.learning.own_model import ship_source
from fl_system.messages import protocol
from fl_system.records.run_dir import RunPaths
from fl_system.runtime.connection_checks import reachable, split_address
from fl_system.runtime.launch import LaunchError
from fl_system.runtime.launch.app_bundle import stage_app
from fl_system.runtime.launch.components import app_dir
from fl_system.runtime.launch.processes import ProcessGroup
from fl_system.runtime.launch.progress import (
    follow_run,
    log_end,
    resume_hint,
    saved_rounds,
    server_log,
)
from fl_system.settings.config_nodes import config_to_json

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

CONNECTION = "fl-system"
STOP_SECONDS = 30.0  # for `flwr stop` when fl-run is stopped


@dataclass(frozen=True)
class Connection:
    """How `flwr run` reaches a SuperLink's Control API."""

    address: str
    insecure: bool = False
    root_certificates: str | None = None


def write_flwr_home(home: Path, conn: Connection) -> None:
    """A private FLWR_HOME whose config.toml names exactly one connection."""
    entry: dict = {"address": conn.address, "insecure": conn.insecure}
    if conn.root_certificates:
        entry["root-certificates"] = str(Path(conn.root_certificates).resolve())
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(
        tomli_w.dumps({"superlink": {"default": CONNECTION, CONNECTION: entry}})
    )


def write_run_config(path: Path, config_json: str) -> Path:
    """The run-config override file: the whole experiment in one string key."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(tomli_w.dumps({protocol.RUN_CONFIG: config_json}))
    return path


def flwr_run_command(app: Path, run_config_file: Path) -> list[str]:
    return [
        "flwr",
        "run",
        str(app),
        CONNECTION,
        "--run-config",
        str(run_config_file),
        "--stream",
    ]


def submit_and_follow(
    cfg: DictConfig,
    paths: RunPaths,
    conn: Connection,
    procs: ProcessGroup,
    env: dict[str, str],
    *,
    remote: bool = False,
    detach: bool = False,
    sign_with: Ed25519PrivateKey | None = None,
) -> None:
    """Submit the run through `conn` with a private FLWR_HOME and follow it to the end.

    A `remote` SuperLink (one the runtime did not start, so does not stop) outlives fl-run:
    Ctrl-C or SIGTERM stops the run on it too (`flwr stop`), or with `detach` leaves it
    running there, the KeyboardInterrupt going on with what was done; and a SuperLink that
    stopped or cannot be reached during the run is said so. With `sign_with` (an operator's
    key) the app is signed, as nodes that trust only their operators' apps require."""
    flwr_home = Path(env["FLWR_HOME"])
    write_flwr_home(flwr_home, conn)
    run_file = write_run_config(flwr_home / "run.toml", config_to_json(cfg))
    app = stage_app(app_dir(), flwr_home / "app")
    if cfg.model.get("source"):  # one's own model's code travels in the FAB (README)
        ship_source(str(cfg.model.source), app)
    if sign_with is not None:  # imported here: a local run signs nothing
        from fl_system.access.app_signature import SIGNATURE_FILE
        from fl_system.flower import fab_manifest
        from fl_system.runtime.app_signing import SigningError, sign_app

        fab_manifest.include(app, SIGNATURE_FILE)
        try:
            sign_app(app, sign_with)
        except SigningError as err:
            raise LaunchError(str(err)) from None
    since = log_end(paths)
    submit = procs.start(
        "flwr run", flwr_run_command(app, run_file), server_log(paths), env, plain=True
    )
    try:
        follow_run(cfg, paths, submit, procs, since=since)
    except LaunchError as err:
        if not paths.summary.exists():
            ended = _refused(paths, since) or _stopped_from_outside(paths, env, since)
            if ended is None and remote:
                ended = _superlink_gone(conn, paths)
            if ended is not None:
                # the ServerApp that would have written it is gone with its SuperLink
                paths.failure.write_text(ended + "\n")
                raise LaunchError(ended) from None
        raise err
    except KeyboardInterrupt as stop:
        if remote:
            procs.stop()  # `flwr run --stream`: it only follows the run
            stop.args = (_leave(paths, env, since, detach),)
        raise


def _leave(paths: RunPaths, env: dict[str, str], since: int, detach: bool) -> str:
    """Stop the run on the server (or, detaching, leave it be); what to tell the user."""
    run_id = _started_run(paths, since)
    if run_id is None:
        return "stopped before the SuperLink started the run"
    if detach:
        return (
            f"detached from Flower run {run_id}, which goes on on the server: `flwr log "
            f"{run_id} <superlink> --stream` follows it, `flwr stop {run_id} <superlink>` stops "
            "it (README: Flower's own commands)"
        )
    try:
        done = subprocess.run(
            ["flwr", "stop", str(run_id), CONNECTION],
            env=env,
            capture_output=True,
            text=True,
            timeout=STOP_SECONDS,
            stdin=subprocess.DEVNULL,
        )
        failed = None if done.returncode == 0 else (done.stdout + done.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as err:
        failed = str(err)
    if failed is not None:
        last = failed.splitlines()[-1] if failed else "no output"
        return (
            f"Flower run {run_id} may still run on the server ({last}): stop it with `flwr "
            f"stop {run_id} <superlink>`"
        )
    return f"Flower run {run_id} was stopped on the server; " + resume_hint(
        saved_rounds(paths), paths.root
    )


def stopped_message(run_id: int, status: str, saved: int | None, run_dir: Path) -> str | None:
    """What to tell the user when Flower says the run ended stopped (None otherwise)."""
    if status.rsplit(":", 1)[-1] != "stopped":
        return None
    return (
        f"Flower run {run_id} was stopped from outside (flwr stop); {resume_hint(saved, run_dir)}"
    )


def _superlink_gone(conn: Connection, paths: RunPaths) -> str | None:
    """The SuperLink stopped (or its machine cannot be reached) during the run."""
    host, port = split_address(conn.address, "runtime.address")
    if reachable(host, port):
        return None
    return f"the SuperLink at {conn.address} stopped or cannot be reached any more; " + resume_hint(
        saved_rounds(paths), paths.root
    )


def _started_run(paths: RunPaths, since: int) -> int | None:
    """The id of the run `flwr run` started, from the part of the log written since `since`
    (the log of a resumed run holds the earlier runs' ids first)."""
    started = re.findall(r"Successfully started run (\d+)", _read(server_log(paths), since))
    return int(started[-1]) if started else None


def _refused(paths: RunPaths, since: int) -> str | None:
    """The SuperLink's answer, on one line, when it refused to start the run (Flower's CLI
    prints it in a box: `[code: N] ...`)."""
    text = _read(server_log(paths), since)
    if _started_run(paths, since) is not None or "[code: " not in text:
        return None
    box = text[text.index("[code: ") :].split("╰")[0]
    said = " ".join(line.strip(" │\n") for line in box.splitlines())
    return "the SuperLink refused the run: " + re.sub(r"\[code: \d+\] ", "", " ".join(said.split()))


def _stopped_from_outside(paths: RunPaths, env: dict[str, str], since: int) -> str | None:
    """Ask the SuperLink what became of the run `flwr run` started."""
    run_id = _started_run(paths, since)
    if run_id is None:
        return None
    try:
        listed = subprocess.run(
            ["flwr", "ls", CONNECTION, "--run-id", str(run_id), "--format", "json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
        )
        runs = json.loads(listed.stdout[listed.stdout.find("{") :]).get("runs", [])
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None
    if not runs:
        return None
    status = str(runs[0].get("status", ""))
    return stopped_message(run_id, status, saved_rounds(paths), paths.root)


def _read(path: Path, since: int) -> str:
    """The file from byte `since` on ("" when it cannot be read)."""
    try:
        return path.read_bytes()[since:].decode(errors="replace")
    except OSError:
        return ""

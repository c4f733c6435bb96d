"""runtime=simulation on a Ray cluster that already runs (`runtime.address`).

Flower's Ray backend uses the Ray its process has joined, if any. The simulation engine joins
the cluster as a driver (fl-run must run on one of its nodes: `ray start --head` or
`ray start --address=HEAD:6379` there first), ships its `sys.path` to the workers as Flower
does, and checks before round 1 that every node runs the same Python, the same packages and
the same fl_system code, and can read the run's dataset. There is no shared filesystem: each
node builds the partitions of the clients it plays into its own cache, from the dataset it
holds (a package's, rebuilt on every node; files at the same path on every node).

The cluster is not ours: ending the engine ends only its Ray job (Ray then removes its
actors); no process of the cluster is ever stopped. A cluster with Ray's token authentication
(RAY_AUTH_MODE=token on every machine) takes the driver whose token is its own, read by Ray
from the environment fl-run passes on; one without it is refused at once, by name.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import platform
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from fl_system.runtime.launch import LaunchError

AUTO = "auto"  # the cluster `ray start` last started or joined on this machine
PACKAGES = ("flwr", "ray", "torch", "torchvision", "numpy", "fl-system")
SOURCES = ("fl_system", "client_app", "server_app")  # the code every node must run alike
CONNECT_SECONDS = 5.0
AUTH_MODE_ENV = "RAY_AUTH_MODE"  # Ray's token authentication: `token` on every machine
PROBE_SECONDS = 600.0  # a node's first data check may parse the dataset


class ClusterError(LaunchError):
    """The cluster cannot run this experiment; the message names the node and the fix."""


def find(address: str) -> str:
    """HOST:PORT of the cluster's head, answering now; else ClusterError saying how to start
    one. `auto`: $RAY_ADDRESS, else the cluster `ray start` used last on this machine."""
    if address == AUTO:
        from ray._private.services import get_ray_address_from_environment

        try:
            address = get_ray_address_from_environment(AUTO, None)
        except ConnectionError:
            raise ClusterError(
                "runtime.address=auto: no Ray cluster runs on this machine (start one with "
                "`ray start --head`, or join one with `ray start --address=HEAD:6379`)"
            ) from None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ClusterError(f"runtime.address must be auto or HOST:PORT, got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_SECONDS).close()
    except OSError as err:
        raise ClusterError(
            f"runtime.address={address}: no Ray head answers there ({err.strerror or err}); "
            f"start one with `ray start --head --port={port}`"
        ) from None
    _check_token(address)
    return address


def _check_token(address: str) -> None:
    """ClusterError at once when the cluster's token authentication refuses this machine
    (`ray.init` would retry for 20 s and say only that it could not connect)."""
    try:  # Ray's own client of its head, as `ray.init` makes it first
        from ray._raylet import GcsClient
        from ray.exceptions import AuthenticationError
    except ImportError:  # another Ray: its own checks say it
        return
    try:
        GcsClient(address=address)
    except AuthenticationError:
        mode = os.environ.get(AUTH_MODE_ENV, "disabled")
        sent = "sends none" if mode != "token" else "sends one that is not the cluster's"
        raise ClusterError(
            f"runtime.address={address}: the Ray cluster takes token-authenticated drivers "
            f"only, and this machine {sent}: set {AUTH_MODE_ENV}=token and the cluster's "
            "token (~/.ray/auth_token, or RAY_AUTH_TOKEN_PATH=FILE)"
        ) from None
    except Exception:  # anything else: ray.init's own checks say it
        return


def join(address: str, client_gpus: float) -> None:
    """Join the cluster as this process's driver and check its nodes (ClusterError if one
    differs from this machine, or no node has the GPUs the clients ask for)."""
    import ray

    connect(address)
    here = fingerprint()
    problems = [
        f"Ray node {node}: {', '.join(diff)}"
        for node, theirs in on_every_node(fingerprint).items()
        if (diff := differences(here, theirs))
    ]
    if problems:
        raise ClusterError(
            "the Ray cluster's nodes differ from this machine (install the same environment "
            "and checkout on every node): " + "; ".join(problems)
        )
    if client_gpus > 0 and not ray.cluster_resources().get("GPU"):
        raise ClusterError(f"runtime.client_gpus={client_gpus} but the Ray cluster has no GPU")


def connect(address: str) -> None:
    """This process joins the cluster, unless it has: Flower's Ray backend then uses the
    connection, and ends it when a run ends (the next run's checks connect again)."""
    import logging

    import ray

    if ray.is_initialized():
        return
    pythonpath = os.pathsep.join(sys.path)  # Flower's RayBackend ships the same
    os.environ["PYTHONPATH"] = pythonpath
    try:
        ray.init(
            address=address,
            runtime_env={"env_vars": {"PYTHONPATH": pythonpath}},
            logging_level=logging.WARNING,
        )
    except Exception as err:  # Ray's own checks: versions, this machine not a node, ...
        raise ClusterError(
            f"could not join the Ray cluster at {address}: {_first_line(err)} (fl-run must "
            "run on a node of the cluster, with the Ray and Python the cluster runs)"
        ) from None


def fingerprint() -> dict[str, str]:
    """What must be the same on every node: Python, the packages, fl_system's code."""
    found = {"Python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    digest = hashlib.sha256()
    for package in SOURCES:
        root = Path(importlib.import_module(package).__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    found["fl_system code"] = digest.hexdigest()[:12]
    return found


def differences(here: dict[str, str], there: dict[str, str]) -> list[str]:
    """`name there (here: ...)` for each entry that differs, in `here`'s order."""
    return [
        f"{name} {there.get(name, 'missing')} (here: {value})"
        for name, value in here.items()
        if there.get(name) != value
    ]


def check_data(address: str, config_json: str) -> None:
    """Every node can load the run's dataset (and has it in its cache afterwards)."""
    connect(address)
    problems = [
        f"Ray node {node}: {problem}"
        for node, problem in on_every_node(_data_problem, config_json).items()
        if problem
    ]
    if problems:
        raise ClusterError("; ".join(problems))


def discard_finished(address: str, config_json: str) -> None:
    """A completed run's client state, removed on every node (each kept what it saved)."""
    connect(address)
    on_every_node(_discard, config_json)


def _data_problem(config_json: str) -> str | None:
    from fl_system.data.configured import load_dataset
    from fl_system.settings.config_nodes import config_from_json

    try:
        load_dataset(config_from_json(config_json))
    except (OSError, ValueError) as err:  # DataError is a ValueError
        return _first_line(err)
    return None


def _discard(config_json: str) -> None:
    from fl_system.runtime.launch.client_state import discard_finished as discard_here
    from fl_system.settings.config_nodes import config_from_json

    discard_here(config_from_json(config_json))


def on_every_node(task: Callable[..., object], *args: object) -> dict[str, object]:
    """`task(*args)` on each live node of the cluster: {node address: result}. A node that
    cannot run it (no fl_system to import, ...) raises ClusterError naming the node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_cpus=0, max_retries=0)(task)
    calls = {}
    for node in (n for n in ray.nodes() if n["Alive"]):
        name = str(node["NodeManagerAddress"])
        if name in calls:
            name = f"{name} ({node['NodeID'][:8]})"
        strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        calls[name] = remote.options(scheduling_strategy=strategy).remote(*args)
    results = {}
    for name, call in calls.items():
        try:
            results[name] = ray.get(call, timeout=PROBE_SECONDS)
        except ray.exceptions.RayError as err:
            raise ClusterError(f"Ray node {name} could not run fl_system: {_cause(err)}") from None
    return results


def _cause(err: BaseException) -> str:
    """The root cause's last line (Ray wraps a task's error with the remote traceback)."""
    cause = getattr(err, "cause", None)
    if isinstance(cause, BaseException):
        return _first_line(cause)
    lines = [line for line in str(err).splitlines() if line.strip()]
    return lines[-1].strip() if lines else type(err).__name__


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__

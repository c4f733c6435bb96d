"""`fl-client`: one SuperNode (one client) on a machine of its own.

Checks everything it can before Flower starts (partition id in range, files present,
server reachable within --connect-timeout with a countdown, the server's TLS certificate
verified against the CA, the authentication key readable), then runs `fl-supernode`
(Flower's SuperNode with fast ClientApp launches) in the foreground, echoing its output.
If the server turns this node away (its key is not registered, or another node holds its
partition id) it stops with that reason.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from flwr.common.constant import HEARTBEAT_MAX_INTERVAL

from fl_system.deploy import enrollment
from fl_system.deploy.server_watch import ServerWatch
from fl_system.flower.flwr_hooks import MIN_HEARTBEAT, REFUSED_LOG
from fl_system.messages import protocol
from fl_system.runtime.connection_checks import (
    DeployError,
    check_auth_key,
    check_plain,
    check_tls,
    echo,
    is_loopback,
    require_file,
    split_address,
    start_piped,
    wait_reachable,
)
from fl_system.runtime.launch.ports import free_port
from fl_system.runtime.launch.processes import tool_env
from fl_system.runtime.supernode.node import HEARTBEAT_ENV, SUPERVISOR_ENV
from fl_system.runtime.supernode.site_checks import trust_line, trusted_keys
from fl_system.runtime.supernode.site_env import POLICY_ENV, SITE_ENV, TRUST_ENV

# The SuperLink does not know this node's key, or a node with this key is still online (one
# killed holds it until its heartbeats lapse). A SuperLink opens its ports a moment before
# fl-server has registered the keys, so this is retried until --connect-timeout runs out.
UNKNOWN_KEY = "Failed to activate SuperNode"
RETRY_SECONDS = 5.0
AUTO = "auto"  # --partition-id auto
# A killed or cut-off node is counted gone 2 heartbeats after its last (Flower's default
# interval, 30 s, made a round wait a minute for a dead node); each beat is one small call.
HEARTBEAT_SECONDS = 5.0
# Flower gives up reconnecting after --connect-timeout; the watch acts only this much later.
WATCH_MARGIN_SECONDS = 10.0
# A stopping client (Ctrl-C, SIGTERM, `docker stop` with its 10 s) gives its SuperNode this
# long after SIGINT; one still reconnecting to a SuperLink that is gone would take longer.
STOP_GRACE_SECONDS = 4.0
# Lines of the SuperNode's output that mean this node will not take part.
FATAL_OUTPUT = {
    protocol.TURNED_AWAY_LOG: None,  # our ClientApp's own line carries the reason
    "SSL/TLS handshake error detected": "the TLS handshake with the SuperLink failed: is "
    "--root-certificates the federation's ca.crt, and the server's certificate still valid?",
    "Giving up reconnection": "lost the SuperLink and could not reach it again within "
    "--connect-timeout",
    REFUSED_LOG: None,  # the SuperLink's reason follows; `_refused` says what it means
    UNKNOWN_KEY: "the SuperLink refused this SuperNode: its --auth-key is not registered there "
    "(fl-server --authorized-keys DIR registers the .pub files at start, fl-server register "
    "KEY.pub while it runs; a key unregistered since is refused too), or a SuperNode with this "
    "key is still online (another fl-client using it; one stopped without leaving is let go "
    "2 heartbeats after its last)",
}


class NotActivated(DeployError):
    """The SuperLink did not activate this SuperNode (its key unknown, or still online)."""


def say(text: str) -> None:
    print(f"fl-client: {text}", flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fl-client", description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", required=True, help="the SuperLink, HOST:9092")
    parser.add_argument(
        "--partition-id",
        type=_partition_id,
        required=True,
        help="this client's partition, or auto: claim a free one in --claims DIR",
    )
    parser.add_argument(
        "--claims", type=Path, help="with --partition-id auto: the claims replicas share"
    )
    parser.add_argument(
        "--enroll",
        type=Path,
        help="make this node's key pair in --state-dir (once) and drop its .pub here, where "
        "fl-server --enroll-dir registers it (replicas of one compose service)",
    )
    parser.add_argument("--num-partitions", type=int, help="how many partitions the data has")
    parser.add_argument(
        "--data",
        "--data-dir",
        dest="data",
        type=Path,
        help="the data this node holds (an image folder, a CSV or Parquet file or folder, a "
        "saved Hugging Face dataset, or train.npz's folder); it never leaves this machine",
    )
    parser.add_argument(
        "--data-kind",
        choices=["images", "table", "hf", "npz"],
        help="what --data holds (default: detected from the path)",
    )
    parser.add_argument("--name", help="how the server names this node in what it reports")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--root-certificates", type=Path, help="the federation's ca.crt")
    parser.add_argument("--auth-key", type=Path, help="this SuperNode's private key (fl-certs)")
    parser.add_argument(
        "--insecure", action="store_true", help="plain text, no TLS: trusted networks only"
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=120.0,
        help="seconds to keep trying to reach the server (also after a lost connection)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="where client state survives restarts (default: per user); with --partition-id "
        "auto, the claimed partition's folder in it (partition-<id>) holds its key and state",
    )
    parser.add_argument(
        "--trust",
        type=Path,
        action="append",
        default=[],
        metavar="KEY.pub",
        help="run only apps this operator (or another --trust) signed",
    )
    parser.add_argument(
        "--policy",
        type=Path,
        metavar="POLICY.yaml",
        help="take part only in runs this site's policy allows (README: site policies)",
    )
    parser.add_argument(
        "--heartbeat",
        type=float,
        default=HEARTBEAT_SECONDS,
        help="seconds between this node's heartbeats: the SuperLink counts it gone after two "
        "missed, and the round under way goes on without it (below 10 needs fl-server's "
        "SuperLink; Flower's own takes 10 to 1800)",
    )
    return parser.parse_args(argv)


def _partition_id(value: str) -> int | str:
    if value == AUTO:
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer or {AUTO}: {value!r}") from None


def settle_identity(args: argparse.Namespace) -> None:
    """--partition-id auto: claim one (`enrollment.claim_partition`); --enroll: this node's
    own key (`enrollment.enroll_key`), used as --auth-key."""
    if args.partition_id == AUTO:
        if args.claims is None or args.num_partitions is None or args.state_dir is None:
            raise DeployError(
                "--partition-id auto needs --claims DIR, --num-partitions N and --state-dir DIR"
            )
        args.partition_id = enrollment.claim_partition(
            args.claims, args.state_dir, args.num_partitions
        )
        args.state_dir = enrollment.partition_folder(args.state_dir, args.partition_id)
        say(f"claimed partition {args.partition_id} of {args.num_partitions}")
    if args.enroll is not None:
        if args.state_dir is None or args.auth_key is not None:
            raise DeployError("--enroll keeps this node's key in --state-dir: no --auth-key")
        args.auth_key = enrollment.enroll_key(args.state_dir, args.enroll)


def node_config(args: argparse.Namespace) -> str:
    """Flower's --node-config string: who this client is (everything else comes from the run)."""
    if args.partition_id < 0:
        raise DeployError(f"--partition-id must be >= 0, got {args.partition_id}")
    if args.num_partitions is None and args.data is None:
        raise DeployError("give --num-partitions N (a partition of a dataset) or --data PATH")
    pairs = {"partition-id": args.partition_id}
    if args.num_partitions is not None:
        if args.num_partitions < 1:
            raise DeployError(f"--num-partitions must be >= 1, got {args.num_partitions}")
        if args.partition_id >= args.num_partitions:
            raise DeployError(
                f"--partition-id {args.partition_id} is out of range for --num-partitions "
                f"{args.num_partitions} (valid: 0..{args.num_partitions - 1})"
            )
        pairs["num-partitions"] = args.num_partitions
    text = " ".join(f"{k}={v}" for k, v in pairs.items())
    if args.data is not None:
        if not args.data.exists():
            raise DeployError(f"--data: nothing at {args.data}")
        text += f' data="{args.data.resolve()}"'
    if args.data_kind is not None:
        text += f' data-kind="{args.data_kind}"'
    if args.name:
        text += f' name="{args.name}"'
    if args.device != "auto":
        text += f' device="{args.device}"'
    if args.state_dir is not None:
        text += f' state-dir="{args.state_dir.resolve()}"'
    return text


def site_name(args: argparse.Namespace) -> str:
    """How this node's site is named in its policy's refusals (the policy's `site` first)."""
    return str(args.name or socket.gethostname())


def supernode_command(args: argparse.Namespace, config: str) -> list[str]:
    cmd = [
        "fl-supernode",
        "--superlink",
        args.server,
        "--node-config",
        config,
        "--max-wait-time",
        str(args.connect_timeout),
        "--port",
        str(free_port()),  # the local ClientApp API: several clients may share a machine
    ]
    if args.insecure:
        cmd.append("--insecure")
    else:
        cmd += ["--root-certificates", str(args.root_certificates.resolve())]
    if args.auth_key is not None:
        cmd += ["--auth-supernode-private-key", str(args.auth_key.resolve())]
    return cmd


def check(args: argparse.Namespace) -> str:
    """Every check that can fail before Flower starts; returns the node config."""
    host, port = split_address(args.server, "--server")
    settle_identity(args)
    config = node_config(args)
    if args.connect_timeout <= 0:
        raise DeployError(f"--connect-timeout must be > 0, got {args.connect_timeout}")
    if not MIN_HEARTBEAT <= args.heartbeat <= HEARTBEAT_MAX_INTERVAL:
        raise DeployError(
            f"--heartbeat must be in [{MIN_HEARTBEAT:g}, {HEARTBEAT_MAX_INTERVAL}] s, "
            f"got {args.heartbeat:g}"
        )
    if args.insecure and args.root_certificates:
        raise DeployError("--insecure and --root-certificates contradict each other")
    if not args.insecure and args.root_certificates is None:
        raise DeployError(
            "TLS needs --root-certificates CA.crt (the federation's ca.crt); pass --insecure "
            "for plain text on a trusted network"
        )
    if args.root_certificates is not None:
        require_file(args.root_certificates, "--root-certificates")
    if args.auth_key is not None:
        check_auth_key(args.auth_key)
    try:
        say(trust_line(trusted_keys(args.trust)))
        if args.policy is not None:  # its code only then: fl-client starts faster without
            from fl_system.runtime.supernode import site_policy

            say(site_policy.load(args.policy, site_name(args)).summary())
    except ValueError as err:
        raise DeployError(str(err)) from None
    if args.insecure and not is_loopback(host):
        say(f"WARNING: plain text to {args.server}: model updates cross the network unencrypted")
    wait_reachable(host, port, args.connect_timeout, say=say)
    if args.insecure:
        check_plain(host, port)
    else:
        check_tls(host, port, args.root_certificates)
    return config


def run(args: argparse.Namespace) -> int:
    config = check(args)
    deadline = time.monotonic() + args.connect_timeout
    while True:
        try:
            code = _run_supernode(args, config)
            break
        except NotActivated as err:
            left = deadline - time.monotonic()
            if left < RETRY_SECONDS:
                raise
            say(f"{err}; retrying in {RETRY_SECONDS:.0f} s (giving up in {left:.0f} s)")
            time.sleep(RETRY_SECONDS)
        except KeyboardInterrupt:
            return 130
    if code != 0:
        print(f"fl-client: error: the SuperNode exited with code {code} (output above)")
    return 1 if code else 0


def _run_supernode(args: argparse.Namespace, config: str) -> int:
    """The SuperNode until it ends (its exit code) or says it will not take part."""
    # its own session: we stop its whole tree (ClientApp processes) ourselves
    env = tool_env({HEARTBEAT_ENV: str(args.heartbeat), SUPERVISOR_ENV: str(os.getpid())})
    if args.trust:  # the node checks each run's app before it takes the run
        env[TRUST_ENV] = os.pathsep.join(str(p.resolve()) for p in args.trust)
    if args.policy is not None:  # and whether the run is one its site takes part in
        env[POLICY_ENV] = str(args.policy.resolve())
        env[SITE_ENV] = site_name(args)
    proc = start_piped(supernode_command(args, config), env, own_session=True)
    signal.signal(signal.SIGTERM, lambda *_: _stop(proc) or sys.exit(143))
    say(f"SuperNode for partition {args.partition_id} started, server {args.server}")
    host, port = split_address(args.server, "--server")
    watch = ServerWatch(host, port, args.connect_timeout + WATCH_MARGIN_SECONDS, proc, _stop)
    try:
        assert proc.stdout is not None
        for line in echo(proc.stdout):
            if "ERROR" in line:
                watch.arm()
            reason = _fatal(line)
            if reason is not None:
                raise (NotActivated if UNKNOWN_KEY in line else DeployError)(reason)
        code = proc.wait()
        if watch.lost:
            raise DeployError(FATAL_OUTPUT["Giving up reconnection"])
        return code
    finally:
        watch.done.set()
        _stop(proc)


def _fatal(line: str) -> str | None:
    for marker, reason in FATAL_OUTPUT.items():
        if marker in line:
            detail = line.split(marker, 1)[1].strip(" :\r\n")
            return reason or (_refused(detail) if marker == REFUSED_LOG else detail)
    return None


def _refused(detail: str) -> str:
    """What the SuperLink's reason for refusing an admitted node means for its user."""
    if "Invalid node ID" in detail:
        return (
            "the SuperLink no longer admits this SuperNode: its key was unregistered "
            "(`fl-server register KEY.pub` on the server admits it again)"
        )
    if "timestamp" in detail.lower():
        return f"the SuperLink refused this SuperNode ({detail}): is this machine's clock right?"
    return f"the SuperLink refused this SuperNode: {detail}"


def _stop(proc: subprocess.Popen, grace: float = STOP_GRACE_SECONDS) -> None:
    """SIGINT the SuperNode's tree, SIGKILL what is left after `grace` seconds (its state
    files are written atomically, so a kill never leaves half of one)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except enrollment.NoFreePartition as err:  # exit 0: a restart policy leaves it stopped
        say(str(err))
        return 0
    except DeployError as err:
        print(f"fl-client: error: {err}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Replicas of one service settle who they are (fl_system.deploy.enrollment): a partition id
held by a lock while they live, and a key pair of their own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fl_system.deploy import client, enrollment, members
from fl_system.runtime.connection_checks import DeployError

_REPLICA = """
import sys, time
from pathlib import Path
from fl_system.deploy.enrollment import claim_partition
print(claim_partition(Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])), flush=True)
time.sleep(600)
"""


class _Replica:
    """A process that claims a partition and holds it until killed."""

    def __init__(self, claims: Path, state: Path, num_partitions: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _REPLICA, str(claims), str(state), str(num_partitions)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise DeployError(self.proc.communicate(timeout=30)[1].strip().splitlines()[-1])
        self.partition_id = int(line)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)


def test_live_replicas_hold_distinct_ids_and_a_dead_ones_id_is_free_again(
    tmp_path: Path,
) -> None:
    claims = tmp_path / "claims"
    replicas = [_Replica(claims, tmp_path / f"state-{i}", 3) for i in range(3)]
    try:
        assert sorted(r.partition_id for r in replicas) == [0, 1, 2]
        with pytest.raises(DeployError, match="all 3 partition ids are held by running"):
            _Replica(claims, tmp_path / "state-extra", 3)
        replicas[1].kill()  # scaled away: its state is gone with it
        newcomer = _Replica(claims, tmp_path / "state-new", 3)
        replicas.append(newcomer)
        assert newcomer.partition_id == replicas[1].partition_id
    finally:
        for replica in replicas:
            replica.kill()


def test_a_restarted_replica_takes_its_own_id_again(tmp_path: Path) -> None:
    claims, state = tmp_path / "claims", tmp_path / "state"
    first = _Replica(claims, state, 4)
    other = _Replica(claims, tmp_path / "other", 4)
    first.kill()
    other.kill()
    again = _Replica(claims, state, 4)  # ids 2 and 3 were never claimed; it wants its own
    try:
        assert again.partition_id == first.partition_id
    finally:
        again.kill()


def test_a_replica_makes_its_key_once_and_enrolls_only_the_public_half(tmp_path: Path) -> None:
    state, enroll = tmp_path / "state", tmp_path / "enroll"
    private = enrollment.enroll_key(state, enroll)
    assert private == state / "node.key"
    assert oct(private.stat().st_mode & 0o777) == "0o600"
    (dropped,) = enroll.iterdir()
    assert dropped.read_bytes() == (state / "node.pub").read_bytes()
    assert len(members.key_bytes(dropped)) > 0
    before = private.read_bytes()
    assert enrollment.enroll_key(state, enroll) == private  # a restart: the same key
    assert private.read_bytes() == before and list(enroll.iterdir()) == [dropped]


def test_replicas_sharing_one_state_volume_keep_key_and_state_per_partition(
    tmp_path: Path,
) -> None:
    """Compose replicas share one state volume: each keeps its key and client state in the
    folder of the partition it claimed, so `down -v` removes them and a replica that takes
    the partition over later goes on with them."""
    shared, claims, enroll = tmp_path / "nodes", tmp_path / "nodes" / "claims", tmp_path / "e"
    argv = [
        "--server", "127.0.0.1:9092", "--insecure", "--partition-id", "auto",
        "--claims", str(claims), "--num-partitions", "2", "--state-dir", str(shared),
        "--enroll", str(enroll),
    ]  # fmt: skip
    holder = _Replica(claims, tmp_path / "elsewhere", 2)  # another replica holds one id
    try:
        args = client.parse_args(argv)
        client.settle_identity(args)
        folder = shared / f"partition-{args.partition_id}"
        assert args.partition_id == 1 - holder.partition_id
        assert (args.state_dir, args.auth_key) == (folder, folder / "node.key")
        assert f'state-dir="{folder}"' in client.node_config(args)
    finally:
        holder.kill()


def test_an_extra_replica_says_it_has_nothing_to_do_and_exits_0(tmp_path: Path) -> None:
    """Exit 0, so that compose's restart policy (on-failure) leaves it stopped instead of
    restarting it in a loop."""
    claims = tmp_path / "claims"
    holder = _Replica(claims, tmp_path / "state-0", 1)
    try:
        done = subprocess.run(
            [
                str(Path(sys.executable).parent / "fl-client"), "--server", "127.0.0.1:9",
                "--insecure", "--partition-id", "auto", "--claims", str(claims),
                "--num-partitions", "1", "--state-dir", str(tmp_path / "state-1"),
            ],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        holder.kill()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "fl-client: all 1 partition ids are held by running replicas: this replica has nothing "
        "to train and stops (raise --num-partitions, FL_NUM_CLIENTS in compose, or run fewer "
        "replicas)"
    )

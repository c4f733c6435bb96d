"""What an fl-client replica does for itself when it cannot be told who it is (identical
replicas of one service: `docker compose up --scale supernode=N`).

- `claim_partition`: a partition id from a folder of claims the replicas share. A replica
  holds an exclusive lock (flock) on its claim file for as long as it runs, so a claim whose
  holder died or was scaled away is free again, and no two live replicas hold one id. A
  replica remembers its id in its own state folder and takes it again after a restart (its
  saved client state belongs to that partition); one with nothing remembered takes the lowest
  id never claimed, else the lowest free one.
- `enroll_key`: the partition's key pair, made in the partition's folder of the state folder
  on first start (the private key never leaves it), its public half dropped into the folder
  `fl-server --enroll-dir` watches, so the SuperLink registers it. Key and client state
  belong to the partition, not to a replica: the compose replicas share one state volume
  (`down -v` removes it; per-replica anonymous volumes were left behind by every replica
  scaled away).

A replica that can write the shared folders can also claim ids and enroll keys for others:
a compose project trusts its own replicas; nodes from outside are registered by the operator
(`fl-server register`).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from pathlib import Path
from typing import IO

from fl_system.deploy.certs import node_key
from fl_system.runtime.connection_checks import DeployError

REMEMBERED = "claimed-partition"  # in the replica's state folder
KEY_NAME = "node"  # <state folder>/node.key and node.pub

_held: list[IO[bytes]] = []  # the claim's open file: its lock lasts as long as the process


class NoFreePartition(DeployError):
    """Every partition id is held by a live replica: an extra replica has nothing to do."""


def claim_partition(claims: Path, state: Path, num_partitions: int) -> int:
    """This replica's partition id, locked for its lifetime (DeployError when every id of
    0..num_partitions-1 is held by a live replica)."""
    claims.mkdir(parents=True, exist_ok=True)
    remembered = _remembered(state, num_partitions)
    ids = range(num_partitions)
    fresh = [i for i in ids if not _claim_file(claims, i).exists()]
    order = ([remembered] if remembered is not None else []) + fresh + list(ids)
    for partition_id in order:
        if _lock(_claim_file(claims, partition_id)):
            state.mkdir(parents=True, exist_ok=True)
            (state / REMEMBERED).write_text(f"{partition_id}\n")
            return partition_id
    raise NoFreePartition(
        f"all {num_partitions} partition ids are held by running replicas: this replica has "
        "nothing to train and stops (raise --num-partitions, FL_NUM_CLIENTS in compose, or "
        "run fewer replicas)"
    )


def partition_folder(state: Path, partition_id: int) -> Path:
    """Where the replica that claimed `partition_id` keeps its key and client state: they
    belong to the partition, so whichever replica holds it next (a restart, a replica scaled
    up again) goes on with them, and nothing is left behind in a replica's own volume."""
    return state / f"partition-{partition_id}"


def enroll_key(state: Path, enroll: Path) -> Path:
    """This replica's private key (made on first start), its public key dropped into
    `enroll` under a name of its own (a hash of the key)."""
    private, public = state / f"{KEY_NAME}.key", state / f"{KEY_NAME}.pub"
    if not private.exists():
        node_key(state, KEY_NAME)
    data = public.read_bytes()
    target = enroll / f"{hashlib.sha256(data).hexdigest()[:16]}.pub"
    if not target.exists():
        enroll.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, target)  # fl-server never reads half a key
    return private


def _remembered(state: Path, num_partitions: int) -> int | None:
    try:
        value = int((state / REMEMBERED).read_text())
    except (OSError, ValueError):
        return None
    return value if 0 <= value < num_partitions else None


def _claim_file(claims: Path, partition_id: int) -> Path:
    return claims / f"partition-{partition_id}"


def _lock(path: Path) -> bool:
    """Take the claim at `path` if no live process holds it (kept until this one exits)."""
    handle = path.open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return False
    _held.append(handle)
    return True

"""Each machine's share of a federation's material (`fl-certs ... --bundles OUT`), in a folder
of its own, so that nothing else needs to reach it:

    OUT/superlink/      ca.crt, server.crt, server.key, supernode-*.pub, admin.pub,
                        submitter.pub
    OUT/admin/          ca.crt, admin.key (the admin's credential: fl-server register, ...)
    OUT/submitter/      ca.crt, submitter.key (a credential that submits runs only: a runner)
    OUT/supernode-<i>/  ca.crt, supernode-<i>.key, admin.pub, submitter.pub
    OUT/public/         ca.crt, admin.pub, submitter.pub (for nodes: fl-client --trust
                        admin.pub --trust submitter.pub runs those operators' signed apps only)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from fl_system.deploy.certs import (
    ADMIN_KEY,
    ADMIN_PUB,
    CA_CERT,
    SERVER_CERT,
    SERVER_KEY,
    SUBMITTER_KEY,
    SUBMITTER_PUB,
    supernode_key_names,
    write_new,
)


def bundle_files(supernodes: int) -> dict[str, list[str]]:
    """The files each machine needs, by bundle name."""
    public_keys = [supernode_key_names(i)[1] for i in range(supernodes)]
    operators = [ADMIN_PUB, SUBMITTER_PUB]  # whose signed apps the nodes run
    bundles = {
        "superlink": [CA_CERT, SERVER_CERT, SERVER_KEY, *public_keys, *operators],
        "admin": [CA_CERT, ADMIN_KEY],
        "submitter": [CA_CERT, SUBMITTER_KEY],
        "public": [CA_CERT, *operators],
    }
    for i in range(supernodes):
        bundles[f"supernode-{i}"] = [CA_CERT, supernode_key_names(i)[0], *operators]
    return bundles


def write_bundles(
    material: Path, out: Path, supernodes: int, *, owner: tuple[int, int] | None = None
) -> list[Path]:
    """Copy each machine's share of `material` into out/<bundle>/ (files already there are
    kept); private keys stay 0600. With `owner` (uid, gid) the copies are given to that user
    (fl-certs run as root for the users of a container image). Returns the files written."""
    written = []
    for bundle, names in bundle_files(supernodes).items():
        folder = out / bundle
        folder.mkdir(parents=True, exist_ok=True)
        for name in names:
            target = folder / name
            if target.exists():
                continue
            private = name.endswith(".key")
            write_new(target, (material / name).read_bytes(), private=private)
            if owner is not None:
                os.chown(target, *owner)
            written.append(target)
        if owner is not None:
            os.chown(folder, *owner)
    return written


def parse_owner(value: str) -> tuple[int, int]:
    uid, _, gid = value.partition(":")
    try:
        return int(uid), int(gid or uid)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not UID[:GID]: {value!r}") from None

"""`fl-certs DIR ...`: the federation's material (`fl_system.deploy.certs`), each machine's
share of it (`--bundles`, `fl_system.deploy.bundles`), or one key pair made where it is used
(`--node-key`, `--operator-key`)."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from collections.abc import Sequence
from pathlib import Path

from fl_system.deploy.bundles import parse_owner, write_bundles
from fl_system.deploy.certs import (
    CA_CERT,
    generate,
    node_key,
    operator_key_pair,
    operator_keys,
)


def _check_ip(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an IP address: {value!r}") from None
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="fl-certs",
        description="Make a CA, a SuperLink certificate and SuperNode key pairs.",
    )
    parser.add_argument("directory", type=Path, help="where to write the files")
    parser.add_argument(
        "--server-name",
        action="append",
        default=[],
        help="a DNS name clients use for the SuperLink (repeatable; localhost is always added)",
    )
    parser.add_argument(
        "--server-ip",
        action="append",
        default=[],
        type=_check_ip,
        help="an IP address clients use for the SuperLink (repeatable; loopback is added)",
    )
    parser.add_argument("--supernodes", type=int, default=0, help="SuperNode key pairs to make")
    parser.add_argument(
        "--node-key",
        metavar="NAME",
        help="only make one SuperNode key pair, NAME.key and NAME.pub, on the node's own "
        "machine: the private key never leaves it; the operator registers NAME.pub with "
        "`fl-server register`",
    )
    parser.add_argument(
        "--operator-key",
        metavar="NAME",
        help="only make one operator key pair, NAME.key (its credential) and NAME.pub, on the "
        "operator's own machine; an admin adds NAME.pub with `fl-server operators add`",
    )
    parser.add_argument("--days", type=int, default=365, help="validity of the certificates")
    parser.add_argument(
        "--if-missing",
        action="store_true",
        help="keep the material when DIRECTORY already has ca.crt (for one-shot containers)",
    )
    parser.add_argument(
        "--bundles",
        type=Path,
        help="also copy each machine's share into BUNDLES/superlink, BUNDLES/admin, "
        "BUNDLES/submitter, BUNDLES/supernode-<i> and BUNDLES/public (missing files only)",
    )
    parser.add_argument(
        "--bundle-owner",
        type=parse_owner,
        metavar="UID[:GID]",
        help="give the bundles' files to this user (needs root)",
    )
    args = parser.parse_args(argv)
    if args.supernodes < 0:
        parser.error(f"--supernodes must be >= 0, got {args.supernodes}")
    if args.days < 1:
        parser.error(f"--days must be >= 1, got {args.days}")
    for option, name in (("--node-key", args.node_key), ("--operator-key", args.operator_key)):
        if name is None:
            continue
        if args.server_name or args.server_ip or args.supernodes or args.bundles:
            parser.error(f"{option} makes one key pair only: leave out the server and bundles")
        if not name or "/" in name or name.startswith("."):
            parser.error(f"{option} must be a plain file name, got {name!r}")
        if args.node_key is not None and args.operator_key is not None:
            parser.error("--node-key and --operator-key: one key pair at a time")
        return args
    if not args.server_name and not args.server_ip:
        parser.error("give the SuperLink's address: --server-name HOST and/or --server-ip IP")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    files: list[Path] = []
    try:
        if args.node_key is not None:
            files = node_key(args.directory, args.node_key)
        elif args.operator_key is not None:
            files = node_key(args.directory, args.operator_key, operator_key_pair)
        elif args.if_missing and (args.directory / CA_CERT).exists():
            print(f"fl-certs: {args.directory / CA_CERT} exists; keeping the material there")
            files = operator_keys(args.directory)
        else:
            files = generate(
                args.directory,
                server_names=args.server_name,
                server_ips=args.server_ip,
                supernodes=args.supernodes,
                days=args.days,
            )
        if args.bundles:
            files += write_bundles(
                args.directory, args.bundles, args.supernodes, owner=args.bundle_owner
            )
    except (FileExistsError, OSError) as err:
        print(f"fl-certs: error: {err}", file=sys.stderr)
        return 2
    for path in files:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())

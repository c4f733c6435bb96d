"""A SuperLink's operators, from its machine: `fl-server operators|audit|login|sign`.

    fl-server operators add KEY.pub --role submitter [--name NAME]   (NAME: the file's stem)
    fl-server operators revoke NAME
    fl-server operators list
    fl-server audit                      every Control API call, oldest first
    fl-server login NAME.key --control HOST:PORT   Flower's CLI (flwr run/ls/log/stop) sends
                                                   NAME's token to HOST:PORT from then on
    fl-server sign APP --credential NAME.key       sign a Flower app's folder: nodes that
                                                   trust NAME run it (`flwr run APP` after)

`operators` and `audit` read and write the SuperLink's `--state-dir` (the server's own files:
whoever runs them there is trusted as the server is); a change counts from the next call,
without a restart. `login` and `sign` run on the operator's machine, with its key.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from fl_system.access import audit
from fl_system.access.operators import ADMIN, ROLES, SUBMITTER, OperatorRegistry, RegistryError
from fl_system.deploy.certs import ADMIN_PUB, SUBMITTER_PUB
from fl_system.runtime.connection_checks import DeployError, require_file
from fl_system.runtime.superlink import OWN_OPERATOR

COMMANDS = ("operators", "audit", "login", "sign")
DEFAULT_STATE_DIR = Path.home() / ".local" / "state" / "fl_system" / "superlink"
OPERATORS_FILE, AUDIT_FILE = "operators.json", "audit.jsonl"
LOGIN_DAYS = 30
# the operators fl-certs makes keys for, each named as its role: (role, public key's file)
FIRST_OPERATORS = ((ADMIN, ADMIN_PUB), (SUBMITTER, SUBMITTER_PUB))


def registry(state_dir: Path) -> OperatorRegistry:
    return OperatorRegistry(state_dir / OPERATORS_FILE)


def audit_path(state_dir: Path) -> Path:
    return state_dir / AUDIT_FILE


def own_operator() -> tuple[Ed25519PrivateKey, str]:
    """(private key, public key line) of fl-server's own operator: a key made afresh at each
    start from the OS's entropy, held in memory, an admin of this SuperLink only."""
    from cryptography.hazmat.primitives import serialization

    key = Ed25519PrivateKey.generate()
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return key, public.decode()


def first_operators(reg: OperatorRegistry, certs: Path) -> list[str]:
    """Add the admin and the submitter whose keys fl-certs made (`certs`/admin.pub,
    submitter.pub), when the registry has no operator yet; what to tell the server's
    operator."""
    try:
        if reg.operators():
            return []
        if not (certs / ADMIN_PUB).is_file():
            return [f"no operators yet: add one with `fl-server operators add NAME.pub --role "
                    f"admin --state-dir {reg.path.parent}` (until then only fl-server itself "
                    "calls the Control API)"]  # fmt: skip
        added = []
        for role, public in FIRST_OPERATORS:
            key = certs / public
            if key.is_file():
                reg.add(role, role, key.read_text())
                added.append(f"operator '{role}' added (role {role}, key {key})")
    except RegistryError as err:
        raise DeployError(str(err)) from None
    return added


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="fl-server", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    operators = commands.add_parser("operators", help="add, revoke, list the operators")
    actions = operators.add_subparsers(dest="action", required=True)
    add = actions.add_parser("add", help="add an operator by its public key")
    add.add_argument("key", type=Path, metavar="KEY.pub")
    add.add_argument("--role", choices=ROLES, required=True)
    add.add_argument("--name", help="its name (default: the key file's name without .pub)")
    revoke = actions.add_parser("revoke", help="refuse an operator from its next call on")
    revoke.add_argument("name")
    listing = actions.add_parser("list", help="every operator, its role, when added or revoked")
    audit_cmd = commands.add_parser("audit", help="print the Control API's audit log")
    for command in (add, revoke, listing, audit_cmd):
        command.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    login = commands.add_parser("login", help="give Flower's CLI a token made with your key")
    login.add_argument("credential", type=Path, metavar="NAME.key")
    login.add_argument(
        "--control", required=True, help="the SuperLink as flwr's connection names it, HOST:PORT"
    )
    login.add_argument("--days", type=int, default=LOGIN_DAYS, help="how long the token lasts")
    signing = commands.add_parser("sign", help="sign a Flower app's folder with your key")
    signing.add_argument("app", type=Path, metavar="APP")
    signing.add_argument("--credential", type=Path, required=True, metavar="NAME.key")
    return parser.parse_args(argv)


def main(argv: Sequence[str], say: Callable[[str], None]) -> int:
    args = parse_args(argv)
    try:
        if args.command == "login":
            return _login(args, say)
        if args.command == "sign":
            return _sign(args, say)
        if args.command == "audit":
            for line in audit.read(audit_path(args.state_dir)):
                print(audit.format_line(line))
            return 0
        return _operators(args, registry(args.state_dir), say)
    except (RegistryError, ValueError) as err:
        raise DeployError(str(err)) from None


def _operators(args: argparse.Namespace, reg: OperatorRegistry, say: Callable[[str], None]) -> int:
    if args.action == "add":
        name = args.name or args.key.stem
        if name == OWN_OPERATOR:
            raise DeployError(f"{OWN_OPERATOR!r} is fl-server's own operator; choose another name")
        op = reg.add(name, args.role, require_file(args.key, "public key").read_text())
        say(f"operator {op.name!r} added (role {op.role}); it may call from now on")
    elif args.action == "revoke":
        op = reg.revoke(args.name)
        say(f"operator {op.name!r} revoked; its next call is refused")
    else:
        for op in reg.operators().values():
            state = f"revoked {op.revoked}" if op.revoked else "active"
            print(f"{op.name}  {op.role}  added {op.added}  {state}")
    return 0


def _sign(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    from fl_system.access.tokens import load_credential
    from fl_system.runtime.app_signing import sign_app

    path = sign_app(args.app, load_credential(args.credential))
    say(f"{args.app} signed with {args.credential.name} ({path.name}); sign again after any change")
    return 0


def _login(args: argparse.Namespace, say: Callable[[str], None]) -> int:
    from flwr.supercore.utils import get_flwr_home

    from fl_system.access.tokens import load_credential, mint
    from fl_system.flower import FlwrInternalsChanged, flwr_credentials, raise_if
    from fl_system.flower.flwr_credentials import store_token

    if args.days < 1:
        raise DeployError(f"--days must be >= 1, got {args.days}")
    try:
        raise_if(flwr_credentials.problems())
    except FlwrInternalsChanged as err:
        raise DeployError(str(err)) from None
    key = load_credential(args.credential)
    home = get_flwr_home()
    home.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = store_token(home, args.control, mint(key, args.days * 86400))
    days = f"{args.days} days"
    say(f"flwr sends the token of {args.credential.name} to {args.control} for {days} ({path})")
    return 0

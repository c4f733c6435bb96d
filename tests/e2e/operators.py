"""What the operator tests of the separate-hosts federation need: a Flower app whose every
ClientApp leaves a marker file (so code that ran on a node shows), Flower's CLI set up on a
host, and the audit lines a stretch of the test added."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import tomli_w

from tests.e2e.federation import Federation

CONNECTION = "fed"
MARKER_APP = """
from pathlib import Path

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

server = ServerApp()
client = ClientApp()


@server.main()
def main(grid: Grid, context: Context) -> None:
    nodes = list(grid.get_node_ids())
    messages = [Message(RecordDict(), dst_node_id=n, message_type="query") for n in nodes]
    replies = list(grid.send_and_receive(messages, timeout=120))
    print(f"marker replies: {sum(r.has_content() for r in replies)}")


@client.query()
def query(message: Message, context: Context) -> Message:
    folder = Path(str(context.run_config["marker-dir"]))
    (folder / f"node-{context.node_id}").write_text("this app's code ran here")
    return Message(RecordDict(), reply_to=message)
"""


def marker_app(folder: Path, marker_dir: Path) -> Path:
    """A Flower app (its pyproject.toml included) writing marker_dir/node-<id> on each node
    its ServerApp reaches."""
    package = folder / "marker_app"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "apps.py").write_text(MARKER_APP)
    project = {
        "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
        "project": {"name": "marker-app", "version": "1.0.0", "dependencies": []},
        "tool": {
            "hatch": {"build": {"targets": {"wheel": {"packages": ["marker_app"]}}}},
            "flwr": {
                "app": {
                    "publisher": "someone",
                    "components": {
                        "serverapp": "marker_app.apps:server",
                        "clientapp": "marker_app.apps:client",
                    },
                    "config": {"marker-dir": str(marker_dir)},
                }
            },
        },
    }
    (folder / "pyproject.toml").write_text(tomli_w.dumps(project))
    return folder


def flwr_home(folder: Path, federation: Federation, ca: Path) -> Path:
    """A FLWR_HOME whose one connection is the federation's SuperLink, over TLS (`ca`)."""
    folder.mkdir(parents=True, exist_ok=True)
    entry = {"address": federation.server, "root-certificates": str(ca)}
    config = {"superlink": {"default": CONNECTION, CONNECTION: entry}}
    (folder / "config.toml").write_text(tomli_w.dumps(config))
    return folder


def said(done: subprocess.CompletedProcess) -> str:
    """A command's output as one line: Flower's CLI boxes its errors and wraps them."""
    text = (done.stdout + done.stderr).translate(str.maketrans("", "", "│╭╮╰╯─"))
    return " ".join(text.split())


def audit_lines(federation: Federation) -> list[dict]:
    path = federation.work / "superlink-state" / "audit.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]

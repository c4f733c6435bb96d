"""The schema check before round 1: each joining node's report against the task.

A node holding its own data reports at its handshake what it holds (`NodeReport`: counts,
classes, columns; no rows). Before it trains, the server compares that with the experiment's
task and, for the first node that does not fit, stops the run with one line naming the
node, its data path and the mismatch (`dataset.on_mismatch=stop`), or leaves the node out
and says so (`exclude`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from flwr.app import Message
from omegaconf import DictConfig

from fl_system.data.node_data import NodeReport, Task, mismatches
from fl_system.messages import protocol
from server_app.rounds import NodeRefused

log = logging.getLogger(__name__)


class DataCheck:
    """Vets handshake replies (Parameters: the experiment, and where to say what it found)."""

    def __init__(self, cfg: DictConfig, say: Callable[[str], None] = log.info) -> None:
        self.task = Task.from_config(cfg)
        self.stop = str(cfg.dataset.on_mismatch) == "stop"
        self.say = say
        self.reports: dict[int, NodeReport] = {}  # partition -> its report

    def __call__(self, partition: int, reply: Message) -> str | None:
        """None when the node's data fits; the reason it is left out when it does not
        (under `stop`, NodeRefused instead)."""
        record = reply.content.config_records.get(protocol.NODE_DATA)
        if record is None:
            name, report = str(partition), None
            problems = ["sent no report of its data (its ClientApp predates node-held data)"]
        else:
            name = str(record[protocol.NODE_NAME])
            report = NodeReport.from_json(str(record[protocol.NODE_REPORT]))
            problems = mismatches(report, self.task)
        where = f" ({report.path})" if report is not None and report.path else ""
        if not problems:
            assert report is not None
            self.reports[partition] = report
            self.say(_described(name, report))
            return None
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        line = f"node {name}{where}: {problems[0]}{more}"
        if self.stop:
            raise NodeRefused(line)
        self.say(f"{line}: left out of the run (dataset.on_mismatch=exclude)")
        return line


def _described(name: str, report: NodeReport) -> str:
    test = f", {report.test_examples} test" if report.test_examples else ""
    skipped = f", {report.skipped} bad records skipped" if report.skipped else ""
    return (
        f"node {name}: {report.train_examples} training{test} records ({report.kind}, "
        f"{report.path}){skipped}"
    )

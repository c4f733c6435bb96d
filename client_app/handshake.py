"""A node's handshake reply: who it is, the model it builds, and what data it holds.

The server compares the model's fingerprint with its own and a node's data report with the
task before the node trains (`server_app.node_checks`); a node that cannot build the model
(its package missing, another version of it) says why instead of failing its first round.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flwr.app import ConfigRecord, MetricRecord, RecordDict
from omegaconf import DictConfig
from torch import nn

from client_app.addons import ClientHooks
from client_app.local_data import NodeIdentity, data_report
from fl_system.data.node_data import node_held
from fl_system.learning.own_model import fingerprint
from fl_system.messages import protocol


def handshake_reply(
    cfg: DictConfig,
    node: NodeIdentity,
    model: Callable[[], nn.Module],
    hooks: Callable[[], Sequence[ClientHooks]],
    training: Callable[[], tuple],
) -> RecordDict:
    """The reply's records: partition id and the hooks' metrics, the model's fingerprint (or
    why it cannot be built), the node's data report when it holds its own data."""
    metrics = MetricRecord({protocol.PARTITION_ID: node.partition_id})
    if node.num_partitions and not node.data_dir:  # it trains a partition of the dataset
        metrics[protocol.NUM_PARTITIONS] = node.num_partitions
    content = RecordDict({protocol.METRICS: metrics})
    try:
        built = {protocol.MODEL_FINGERPRINT: fingerprint(model())}
    except Exception as err:  # the run's model, possibly one's own code: say why, stop here
        built = {protocol.MODEL_ERROR: str(err).strip().splitlines()[0] or type(err).__name__}
    content[protocol.NODE_MODEL] = ConfigRecord({**built, protocol.NODE_NAME: node.label})
    if protocol.MODEL_ERROR in built:
        return content
    if node_held(cfg):  # what it holds, no rows: the server checks it against the task
        report = data_report(cfg, node)
        content[protocol.NODE_DATA] = ConfigRecord(
            {protocol.NODE_REPORT: report.to_json(), protocol.NODE_NAME: node.label}
        )
        if report.error is not None:
            return content
    for hook in hooks():
        metrics.update(hook.handshake_metrics(training))
    return content

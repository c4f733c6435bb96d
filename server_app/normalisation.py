"""`dataset.normalize=federated`: a statistics exchange before round 1.

Every connected node sends, per channel or numeric feature, the count, sum and centred sum of
squares of the records it trains on (`fl_system.data.node_data.statistics`); the server
derives the union's means and standard deviations, and the run's config, completed with
them, reaches every node at a second handshake. Nodes that join later get it at theirs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid
from omegaconf import DictConfig, OmegaConf

from fl_system.data.node_data.statistics import combine
from fl_system.messages import protocol
from server_app.exchange import exchange
from server_app.rounds import RunFailed


@dataclass(frozen=True)
class Normalisation:
    """What the exchange derived, and what each node's reply weighed on the wire."""

    mean: list[float]
    std: list[float]
    reply_bytes: dict[int, int]  # partition -> bytes of its reply

    def completed(self, cfg: DictConfig) -> DictConfig:
        """`cfg` with dataset.mean and dataset.std set to the derived values."""
        plain = OmegaConf.to_container(cfg, resolve=True)
        assert isinstance(plain, dict)
        plain["dataset"].update(mean=self.mean, std=self.std)
        done = OmegaConf.create(plain)
        OmegaConf.set_readonly(done, True)
        return done


def derive(
    grid: Grid,
    nodes: Mapping[int, int],
    *,
    timeout: float,
    say: Callable[[str], None],
) -> Normalisation:
    """Ask every node in `nodes` (node -> partition) for its moments; combine them."""
    messages = [
        Message(
            RecordDict({protocol.CONFIG: ConfigRecord({})}),
            dst_node_id=node,
            message_type=protocol.STATS,
        )
        for node in sorted(nodes)
    ]
    traffic = exchange(grid, messages, timeout=timeout)
    moments, sizes, failed = [], {}, []
    for reply in traffic.replies:
        node = reply.metadata.src_node_id
        if reply.has_error() or protocol.STATS_RECORD not in reply.content.array_records:
            failed.append(f"partition {nodes[node]}")
            continue
        record = reply.content.array_records[protocol.STATS_RECORD]
        moments.append({k: record[k].numpy().astype(np.float64) for k in ("count", "sum", "m2")})
        sizes[nodes[node]] = traffic.up_by_node[node].whole
    if failed or len(moments) < len(nodes):
        missing = ", ".join(failed) or f"{len(nodes) - len(moments)} nodes timed out"
        raise RunFailed(f"dataset.normalize=federated: no statistics from {missing}")
    mean, std = combine(moments)
    say(
        f"normalisation from {len(moments)} nodes' statistics (counts, sums, sums of squares; "
        f"at most {max(sizes.values())} bytes a node): mean {_short(mean)}, std {_short(std)}"
    )
    return Normalisation(mean, std, sizes)


def _short(values: list[float]) -> str:
    shown = ", ".join(f"{v:.4g}" for v in values[:6])
    return f"[{shown}{', ...' if len(values) > 6 else ''}]"

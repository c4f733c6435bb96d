"""SecAgg+ (Bell et al., CCS 2020), the server's half, on plain records: the server learns the
weighted sum of the clients' vectors and nothing of any one of them.

The clients run Flower's own `secaggplus_mod`; Flower's server half (`SecAggPlusWorkflow`)
needs a legacy strategy and context, so the four stages are driven here, stage for stage as
Flower's workflow does, on the configs records the mod reads and writes:

    setup             the protocol's numbers to every client; each answers two public keys
    share keys        each client gets its neighbours' keys; answers its secret shares,
                      encrypted for each neighbour
    collect masked    each client gets the shares meant for it (with its training message),
                      trains, and answers [w, w * v] quantised and masked
    unmask            each survivor gets who survived and who dropped among its neighbours;
                      answers the shares that remove the survivors' own masks and the dropped
                      clients' pairwise ones

Cryptography, secret sharing, masks and quantisation are `flwr.common.secure_aggregation`'s
(and `flwr.supercore.primitives`'); nothing here computes a key or a mask of its own. A stage
whose survivors have fewer than `threshold` live neighbours fails with `SecAggFailed`.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from flwr.app import ConfigRecord
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.crypto.shamir import combine_shares
from flwr.common.secure_aggregation.crypto.symmetric_encryption import generate_shared_key
from flwr.common.secure_aggregation.ndarrays_arithmetic import (
    factor_extract,
    get_parameters_shape,
    parameters_addition,
    parameters_mod,
    parameters_subtraction,
)
from flwr.common.secure_aggregation.quantization import dequantize
from flwr.common.secure_aggregation.secaggplus_constants import Key, Stage
from flwr.common.secure_aggregation.secaggplus_utils import pseudo_rand_gen
from flwr.supercore.primitives.asymmetric import bytes_to_private_key, bytes_to_public_key

from fl_system.privacy.secagg import SecAggSettings

Configs = Mapping[int, ConfigRecord]  # node id -> its secaggplus configs record


class SecAggFailed(RuntimeError):
    """The protocol cannot finish this round (too few clients left to unmask)."""


@dataclass
class SecAggRound:
    """One round of SecAgg+ among `nodes`: call the stages in order, each with the replies
    of the previous one (a node that did not answer has dropped out)."""

    settings: SecAggSettings
    nodes: Sequence[int]
    num_shares: int = field(init=False)
    threshold: int = field(init=False)
    neighbours: dict[int, set[int]] = field(init=False)
    active: set[int] = field(init=False)
    public_keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    sharers: set[int] = field(default_factory=set)  # whose secrets their neighbours hold
    _masked: list[np.ndarray] | None = None

    def __post_init__(self) -> None:
        if len(self.nodes) < 2:
            raise SecAggFailed(f"secure aggregation needs 2 clients or more, got {len(self.nodes)}")
        self.num_shares, self.threshold = self.settings.shares_and_threshold(len(self.nodes))
        order = list(self.nodes)
        secrets.SystemRandom().shuffle(order)  # who neighbours whom: not secret, not seeded
        half = self.num_shares >> 1
        self.neighbours = {
            nid: {order[(i + k) % len(order)] for k in range(-half, half + 1)}
            for i, nid in enumerate(order)
        }
        self.active = set(self.nodes)

    # ----- the four stages --------------------------------------------------------------------
    def setup(self) -> dict[int, ConfigRecord]:
        """Stage 0: the protocol's numbers, to every client."""
        s = self.settings
        numbers = {
            Key.STAGE: Stage.SETUP,
            Key.SAMPLE_NUMBER: len(self.nodes),
            Key.SHARE_NUMBER: self.num_shares,
            Key.THRESHOLD: self.threshold,
            Key.CLIPPING_RANGE: s.clipping_range,
            Key.TARGET_RANGE: s.quantization_range,
            Key.MOD_RANGE: s.modulus_range,
            Key.MAX_WEIGHT: s.max_weight,
        }
        return {nid: ConfigRecord(dict(numbers)) for nid in self.nodes}  # type: ignore[arg-type]

    def share_keys(self, replies: Configs) -> dict[int, ConfigRecord]:
        """Stage 1: each client's neighbours' public keys (from stage 0's replies)."""
        self._survivors(replies, "setup")
        for nid in self.active:
            keys = replies[nid]
            self.public_keys[nid] = (
                cast(bytes, keys[Key.PUBLIC_KEY_1]),
                cast(bytes, keys[Key.PUBLIC_KEY_2]),
            )
        out = {}
        for nid in self.active:
            record = ConfigRecord(
                {str(n): list(self.public_keys[n]) for n in self.neighbours[nid] & self.active}
            )
            record[Key.STAGE] = Stage.SHARE_KEYS
            out[nid] = record
        return out

    def collect(self, replies: Configs) -> dict[int, ConfigRecord]:
        """Stage 2: the encrypted shares meant for each client (stage 1's replies), to go with
        its training message."""
        self._survivors(replies, "key sharing")
        self.sharers = set(self.active)
        forward: dict[int, tuple[list[int], list[bytes]]] = {n: ([], []) for n in self.active}
        for src in sorted(self.active):
            res = replies[src]
            dsts = cast(list[int], res[Key.DESTINATION_LIST])
            texts = cast(list[bytes], res[Key.CIPHERTEXT_LIST])
            for dst, text in zip(dsts, texts, strict=True):
                if dst in forward:
                    forward[dst][0].append(src)
                    forward[dst][1].append(text)
        return {
            nid: ConfigRecord(
                {
                    Key.STAGE: Stage.COLLECT_MASKED_VECTORS,
                    Key.CIPHERTEXT_LIST: texts,
                    Key.SOURCE_LIST: srcs,
                }
            )
            for nid, (srcs, texts) in forward.items()
        }

    def unmask(self, replies: Configs) -> dict[int, ConfigRecord]:
        """Stage 3: the masked vectors summed (stage 2's replies); each survivor is asked for
        the shares of its neighbours, live and dropped."""
        self._survivors(replies, "training")
        total: list[np.ndarray] | None = None
        for nid in sorted(self.active):
            masked = cast(list[bytes], replies[nid][Key.MASKED_PARAMETERS])
            vector = [bytes_to_ndarray(b) for b in masked]
            total = vector if total is None else parameters_addition(total, vector)
        assert total is not None
        self._masked = parameters_mod(total, self.settings.modulus_range)
        dead = self.sharers - self.active
        return {
            nid: ConfigRecord(
                {
                    Key.STAGE: Stage.UNMASK,
                    Key.ACTIVE_NODE_ID_LIST: sorted(self.neighbours[nid] & self.active),
                    Key.DEAD_NODE_ID_LIST: sorted(self.neighbours[nid] & dead),
                }
            )
            for nid in self.active
        }

    def result(self, replies: Configs) -> tuple[list[np.ndarray], float]:
        """The weighted average of the vectors of the clients that sent one, and the sum of
        their (quantised) weights over max_weight, from stage 3's shares."""
        s = self.settings
        summed = set(self.active)  # whose vectors are in the sum; the other sharers dropped,
        shares: dict[int, list[bytes]] = {nid: [] for nid in self.sharers}  # masks and all
        for nid in set(replies) & summed:
            res = replies[nid]
            owners = cast(list[int], res[Key.NODE_ID_LIST])
            for owner, share in zip(owners, cast(list[bytes], res[Key.SHARE_LIST]), strict=True):
                if owner in shares:
                    shares[owner].append(share)
        masked = self._masked
        assert masked is not None, "unmask() comes first"
        shapes = get_parameters_shape(masked)
        for nid, owned in shares.items():
            if len(owned) < self.threshold:
                raise SecAggFailed(
                    f"{len(owned)} shares of node {nid}'s secret came back, "
                    f"{self.threshold} are needed (secagg.reconstruction_threshold)"
                )
            secret = combine_shares(owned)
            if nid in summed:  # its own mask
                mask = pseudo_rand_gen(secret, s.modulus_range, shapes)
                masked = parameters_subtraction(masked, mask)
                continue
            for other in self.neighbours[nid] & summed - {nid}:  # a dropped one's pairwise masks
                key = generate_shared_key(
                    bytes_to_private_key(secret), bytes_to_public_key(self.public_keys[other][0])
                )
                mask = pseudo_rand_gen(key, s.modulus_range, shapes)
                masked = (
                    parameters_addition(masked, mask)
                    if nid > other
                    else parameters_subtraction(masked, mask)
                )
        vector = parameters_mod(masked, s.modulus_range)
        weight, vector = factor_extract(vector)
        if int(weight) == 0:
            raise SecAggFailed("every summed client's weight is 0: there is no average")
        average = dequantize(vector, s.clipping_range, s.quantization_range)
        offset = -(len(summed) - 1) * s.clipping_range
        scale = s.quantization_range / int(weight)
        return [(layer + offset) * scale for layer in average], int(weight) / s.quantization_range

    # ----- survivors -------------------------------------------------------------------------
    def _survivors(self, replies: Configs, stage: str) -> None:
        """Keep the nodes that answered. Every node whose secret may be needed (those still
        in, and those that dropped after sharing it) needs `threshold` live neighbours
        (itself included, if live), or the protocol cannot unmask."""
        self.active &= set(replies)
        for nid in self.active | self.sharers:
            live = len(self.neighbours[nid] & self.active)
            if live < self.threshold:
                raise SecAggFailed(
                    f"after {stage}, {len(self.active)} of {len(self.nodes)} clients are left: "
                    f"node {nid} has {live} live neighbours, {self.threshold} are needed "
                    "(secagg.reconstruction_threshold)"
                )

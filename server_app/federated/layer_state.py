"""Server-side vectors shaped like the model (SCAFFOLD's c, FedDyn's h), one per float layer.

They are created lazily, as zeros, from the first model the strategy sees (their shapes are
the model's), kept in float64, sent in the layer's own dtype, and checkpointed under
`<prefix>/<layer name>` keys so a resumed run continues with the same values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord

from server_app.federated.replies import ClientReply
from server_app.federated.state import StrategyState
from server_app.federated.strategy import FederatedStrategy
from server_app.rounds import RoundPlan


def float_layers(record: ArrayRecord) -> dict[str, np.ndarray]:
    """Layer name -> array for the record's floating-point layers, in record order."""
    out: dict[str, np.ndarray] = {}
    for name in record:
        arr = record[name].numpy()
        if np.issubdtype(arr.dtype, np.floating):
            out[name] = arr
    return out


def flat_uploads(start: ArrayRecord, replies: Sequence[ClientReply]) -> np.ndarray:
    """Delta_i = w - w_i over the float layers of the model the replies started from, one
    flattened float64 row per reply (what TACO and FoolsGold compare)."""
    layers = float_layers(start)
    rows = []
    for r in replies:
        parts = [
            layers[name].astype(np.float64).reshape(-1) - arr.astype(np.float64).reshape(-1)
            for name, arr in zip(start.keys(), r.arrays, strict=True)
            if name in layers
        ]
        rows.append(np.concatenate(parts))
    return np.stack(rows)


class LayerState:
    """Named float64 arrays over a model's float layers; zeros until changed."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.values: dict[str, np.ndarray] | None = None

    def ensure(self, template: ArrayRecord) -> dict[str, np.ndarray]:
        """The values, created as zeros shaped like `template`'s float layers if still unset.

        Raises ValueError if existing values do not match the template's float layers (a
        checkpoint from another model, say).
        """
        layers = float_layers(template)
        if self.values is None:
            self.values = {k: np.zeros(v.shape, dtype=np.float64) for k, v in layers.items()}
            return self.values
        mine = {k: v.shape for k, v in self.values.items()}
        theirs = {k: v.shape for k, v in layers.items()}
        if mine != theirs:
            raise ValueError(
                f"{self.prefix} state has layers {mine} but the model has float layers {theirs}"
            )
        return self.values

    def flat(self, template: ArrayRecord) -> np.ndarray:
        """The values as one float64 vector, in `template`'s float-layer order (that of
        `flat_uploads`)."""
        values = self.ensure(template)
        return np.concatenate([values[name].reshape(-1) for name in float_layers(template)])

    def record(self, template: ArrayRecord) -> ArrayRecord:
        """The values as an ArrayRecord in `template`'s layer order and dtypes."""
        values = self.ensure(template)
        return ArrayRecord(
            {
                name: Array(values[name].astype(arr.dtype))
                for name, arr in float_layers(template).items()
            }
        )

    def shifted(self, arrays: ArrayRecord, scale: float) -> ArrayRecord:
        """`arrays` + scale * values on the float layers (in their dtype), the rest as is:
        FedDyn's theta_avg - h / alpha, FedACG's lookahead w + lam m."""
        values = self.ensure(arrays)
        out = {}
        for name in arrays:
            arr = arrays[name].numpy()
            if name in values:
                arr = (arr.astype(np.float64) + scale * values[name]).astype(arr.dtype)
            out[name] = Array(arr)
        return ArrayRecord(out)

    def norm(self) -> float:
        """Euclidean norm over all layers together (0 before the state exists)."""
        if not self.values:
            return 0.0
        return float(np.sqrt(sum(float(np.sum(v * v)) for v in self.values.values())))

    # ----- checkpointing -------------------------------------------------------------------
    def state_dict(self) -> dict[str, np.ndarray]:
        if self.values is None:
            return {}
        return {f"{self.prefix}/{name}": v.copy() for name, v in self.values.items()}

    def take_state(self, state: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Load this prefix's keys from `state`; return the keys that belong to others."""
        head = f"{self.prefix}/"
        mine = {k[len(head) :]: v for k, v in state.items() if k.startswith(head)}
        self.values = (
            {name: np.asarray(v, dtype=np.float64).copy() for name, v in mine.items()}
            if mine
            else None
        )
        return {k: v for k, v in state.items() if not k.startswith(head)}


class ServerVectorStrategy(FederatedStrategy):
    """A strategy whose server state is one model-shaped vector (SCAFFOLD's c, FedDyn's h,
    STEM's momentum, FedACG's m): checkpointed, its norm logged as `server_state_norm`."""

    def server_vector(self) -> LayerState:
        raise NotImplementedError

    def forget_derived(self) -> None:
        """Drop what was computed from the vector (a cached record or model) after a load."""

    def round_metrics(
        self, plan: RoundPlan, replies: list[ClientReply], weights: np.ndarray
    ) -> dict[str, float]:
        return {"server_state_norm": self.server_vector().norm()}

    def state_dict(self) -> StrategyState:
        return {**super().state_dict(), **self.server_vector().state_dict()}

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        rest = self.server_vector().take_state(state)
        self.forget_derived()
        super().load_state_dict(rest)

"""The model check at the handshake: every node must build the run's model.

A node builds the model from the run's config with the code it has; another version of
one's own package, or none, gives another model or none. Each handshake reply carries the
model's fingerprint (class, layer names, shapes, dtypes) or why the node could not build it;
the first node whose model differs from the server's (under model=app, the first node's)
stops the run before round 1 with one line naming the node and the first difference (fl-run
exits 2).
"""

from __future__ import annotations

from flwr.app import Message
from omegaconf import DictConfig

from fl_system.learning.app_supplied import model_from_app
from fl_system.learning.own_model import build_model, fingerprint, first_difference
from fl_system.messages import protocol
from server_app.rounds import NodeRefused


class ModelCheck:
    """Vets handshake replies against the server's own build of the run's model, or under
    model=app (the nodes' ClientApp builds it) against the first node's."""

    def __init__(self, cfg: DictConfig) -> None:
        self.ours = None if model_from_app(cfg) else fingerprint(build_model(cfg))
        self.reference = "the server"
        self.source = cfg.model.get("source")

    def __call__(self, partition: int, reply: Message) -> str | None:
        """None when the node's model is the run's; NodeRefused when it is not."""
        record = reply.content.config_records.get(protocol.NODE_MODEL)
        if record is None:  # a ClientApp from before the check: nothing to compare
            return None
        name = str(record.get(protocol.NODE_NAME, partition))
        if protocol.MODEL_ERROR in record:
            hint = "" if self.source else " (install the model's package on that node)"
            raise NodeRefused(
                f"node {name}: cannot build the run's model: {record[protocol.MODEL_ERROR]}{hint}"
            )
        theirs = str(record[protocol.MODEL_FINGERPRINT])
        if self.ours is None:
            self.ours, self.reference = theirs, f"node {name}"
            return None
        difference = first_difference(self.ours, theirs)
        if difference is not None:
            raise NodeRefused(
                f"node {name}: builds another model than {self.reference}: {difference}"
            )
        return None

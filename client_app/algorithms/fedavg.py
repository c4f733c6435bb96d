"""FedAvg's client: plain local SGD, nothing added."""

from __future__ import annotations

from client_app.algorithms.base import LocalRule


class FedAvgRule(LocalRule):
    """Local epochs of mini-batch SGD on the client's own data."""

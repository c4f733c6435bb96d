"""FedNova's client: plain local SGD; the trainer already reports tau_k (`protocol.NUM_STEPS`).

The normalisation by tau_k happens on the server (`server_app/strategies/fednova.py`), so
clients that run different numbers of steps (unequal data with fixed epochs) need nothing
extra here.
"""

from __future__ import annotations

from client_app.algorithms.base import LocalRule


class FedNovaRule(LocalRule):
    """Local epochs of mini-batch SGD on the client's own data (FedAvg's client)."""

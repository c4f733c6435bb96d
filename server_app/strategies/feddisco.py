"""FedDisco (Ye et al., ICML 2023): FedAvg with Disco weighting switched on (the paper's
FedAvg + Disco). The weighting itself is an add-on every averaging strategy accepts
(`algorithm.disco.enabled=true`): server_app/addons/disco.py."""

from __future__ import annotations

from server_app.strategies.fedavg import FedAvg


class FedDisco(FedAvg):
    """FedAvg whose model average uses FedDisco's weights (the paper's FedAvg + Disco)."""

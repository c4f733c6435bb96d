"""FedGSNR (Algorithm 1 of the paper): FedAvg with the GSNR step schedule switched on. The
schedule itself is an add-on FedAvg, FedProx and SCAFFOLD accept (`algorithm.gsnr.enabled=true`):
server_app/addons/gsnr.py."""

from __future__ import annotations

from server_app.strategies.fedavg import FedAvg


class FedGsnr(FedAvg):
    """FedAvg with the GSNR step schedule (`algorithm=fedgsnr` switches it on)."""

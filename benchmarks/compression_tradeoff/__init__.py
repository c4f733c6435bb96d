"""Accuracy against bytes on the wire: compression under FedAvg and EFL."""

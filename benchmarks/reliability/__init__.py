"""Faults injected for real: dying clients and servers, hostile replies, soak, scale."""

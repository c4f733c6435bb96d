"""EFL's CPU-sized claims: the elastic penalty, stragglers, per-client accuracy."""

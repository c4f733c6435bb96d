"""The learning itself, free of processes and config files: models, codecs, aggregation
and evaluation math, seeds, and the simulated behaviours of clients (stragglers, freeloaders,
malicious replies)."""

"""`fl-compare`: the runs of a sweep (or any run directories) side by side, seeds pooled."""

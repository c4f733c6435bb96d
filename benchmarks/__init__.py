"""Benchmark studies, one folder each; run them as modules from the repository root."""

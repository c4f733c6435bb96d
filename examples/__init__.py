"""Worked examples: scripts a new user runs as they are (see each folder's README)."""

"""One setting at a time: its checks and their error, and config nodes built into objects."""

"""Same seed, same result: every algorithm before and after a change."""

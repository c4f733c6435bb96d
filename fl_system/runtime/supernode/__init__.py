"""Our SuperNode: Flower's, with ClientApps forked from a warm launcher and adaptive polling."""

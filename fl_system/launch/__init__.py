"""How processes are started: local (real processes on loopback), simulation, remote."""


class LaunchError(RuntimeError):
    """A runtime could not start, reach or finish the federation."""

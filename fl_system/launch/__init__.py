"""How processes are started: local (real processes on loopback), simulation, remote."""

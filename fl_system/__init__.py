"""fl_system: the core both apps import.

Its first import starts fl-run's clock (`startup`): fl-run's console script imports this package
before anything else, so a run counts from fl-run's own start.
"""

from fl_system.runtime import startup  # noqa: F401  (the clock starts with this package)

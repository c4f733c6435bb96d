"""Message objects pulled with a short first retry, where Flower waits a whole second.

A sender registers a message, then uploads its objects (the model's arrays); a receiver that
asks in between is told "unavailable", and Flower's `pull_objects` tries again after
PULL_INITIAL_BACKOFF (1 s), doubling to PULL_BACKOFF_CAP (10 s). On a small model the upload
takes milliseconds, so that second, paid up to twice a round (a SuperNode pulling the train
message from the SuperLink, then its ClientApp pulling it from the SuperNode), was most of a
round: 4 nodes training the digits MLP took 0.7 s a round, or 2.2 s when the race was lost.
Here the first retry comes after FIRST_RETRY s and doubles from there to Flower's cap, so a
large upload is polled as Flower polls it after a few more cheap tries.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

from flwr.supercore.inflatable import inflatable_utils

FIRST_RETRY = 0.02  # seconds before the first retry of an object still uploading

# who pulls -> (the Flower module it pulls in, the name that module calls the pull by)
PULLERS = {
    "supernode": ("flwr.supernode.start_client_internal", "pull_objects"),
    "clientapp": ("flwr.supernode.runtime.run_clientapp", "pull_and_inflate_object_from_tree"),
    "serverapp": ("flwr.superlink.grid.http_grid", "pull_objects"),
}


def problems() -> list[str]:
    """What moved in the installed flwr of the pulls changed here (Flower's own functions are
    read: the modules may hold our wrappers already)."""
    found = []
    for module_name, name in PULLERS.values():
        if not hasattr(importlib.import_module(module_name), name):
            found.append(f"{module_name} no longer calls {name}")
        pull = getattr(inflatable_utils, name, None)
        if pull is None or "initial_backoff" not in inspect.signature(pull).parameters:
            found.append(f"{inflatable_utils.__name__}.{name} no longer takes initial_backoff")
    return found


def retry_sooner(puller: str) -> None:
    """Make this process's `puller` ("supernode", "clientapp" or "serverapp") retry an object
    first after FIRST_RETRY s. Calling it again changes nothing."""
    module_name, name = PULLERS[puller]
    module = importlib.import_module(module_name)
    pull: Callable[..., object] = getattr(module, name)
    if getattr(pull, "retries_sooner", False):
        return

    def sooner(*args: object, **kwargs: object) -> object:
        kwargs.setdefault("initial_backoff", FIRST_RETRY)
        return pull(*args, **kwargs)

    sooner.retries_sooner = True  # type: ignore[attr-defined]
    setattr(module, name, sooner)

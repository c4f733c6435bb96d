"""An object still uploading is asked for again after FIRST_RETRY s, not Flower's 1 s."""

from __future__ import annotations

import importlib
import itertools
import time

import pytest
from flwr.supercore.constant import PULL_INITIAL_BACKOFF
from flwr.supercore.inflatable import inflatable_utils
from flwr.supercore.inflatable.inflatable_utils import ObjectUnavailableError

from fl_system.flower import object_pulls
from fl_system.flower.object_pulls import FIRST_RETRY, PULLERS

JITTER = 0.2  # Flower's backoff is drawn within +-20 % of its value


def _uploading(times: list[float], unavailable: int) -> object:
    """A pull function whose object arrives on its `unavailable + 1`-th ask."""

    def pull(object_id: str) -> bytes:
        times.append(time.monotonic())
        if len(times) <= unavailable:
            raise ObjectUnavailableError(object_id)
        return b"content"

    return pull


@pytest.mark.parametrize("puller", ["supernode", "serverapp"])
def test_the_first_retry_comes_before_flowers_first_backoff(
    monkeypatch: pytest.MonkeyPatch, puller: str
) -> None:
    module_name, name = PULLERS[puller]
    module = importlib.import_module(module_name)
    monkeypatch.setattr(module, name, getattr(module, name))  # undone after the test
    object_pulls.retry_sooner(puller)
    times: list[float] = []
    got = getattr(module, name)(["object"], _uploading(times, unavailable=2))
    assert got == {"object": b"content"}
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert len(gaps) == 2
    # Flower never waits less than 0.8 s; here the waits are FIRST_RETRY and twice that
    assert max(gaps) < PULL_INITIAL_BACKOFF * (1 - JITTER), gaps
    assert gaps[0] >= FIRST_RETRY * (1 - JITTER) and gaps[1] >= 2 * FIRST_RETRY * (1 - JITTER)


def test_a_second_install_wraps_nothing_again(monkeypatch: pytest.MonkeyPatch) -> None:
    module_name, name = PULLERS["clientapp"]
    module = importlib.import_module(module_name)
    monkeypatch.setattr(module, name, getattr(module, name))
    object_pulls.retry_sooner("clientapp")
    once = getattr(module, name)
    object_pulls.retry_sooner("clientapp")
    assert getattr(module, name) is once


def test_an_explicit_backoff_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    module_name, name = PULLERS["supernode"]
    module = importlib.import_module(module_name)
    seen: dict[str, object] = {}
    monkeypatch.setattr(module, name, lambda *args, **kwargs: seen.update(kwargs))
    object_pulls.retry_sooner("supernode")
    getattr(module, name)(["object"], None)
    assert seen == {"initial_backoff": FIRST_RETRY}
    getattr(module, name)(["object"], None, initial_backoff=3.0)
    assert seen == {"initial_backoff": 3.0}


def test_a_pull_that_moved_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    assert object_pulls.problems() == []
    module_name, name = PULLERS["clientapp"]
    monkeypatch.delattr(importlib.import_module(module_name), name)
    assert object_pulls.problems() == [f"{module_name} no longer calls {name}"]
    monkeypatch.setattr(inflatable_utils, "pull_objects", lambda ids, fn: {})
    said = "flwr.supercore.inflatable.inflatable_utils.pull_objects no longer takes initial_backoff"
    assert said in object_pulls.problems()


def test_our_own_wrappers_are_not_taken_for_a_changed_flwr(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for puller, (module_name, name) in PULLERS.items():
        module = importlib.import_module(module_name)
        monkeypatch.setattr(module, name, getattr(module, name))
        object_pulls.retry_sooner(puller)  # as a node, a launcher or a ServerApp has them
    assert object_pulls.problems() == []

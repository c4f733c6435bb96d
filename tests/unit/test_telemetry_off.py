"""With telemetry off, a Flower event builds nothing (no platform probes run as
subprocesses, no source id read): what every ClientApp task would otherwise pay."""

from __future__ import annotations

import platform

import pytest
from flwr.supercore import telemetry

from fl_system.flower import telemetry_off


def _probed(*_: object) -> None:
    raise AssertionError("a platform probe ran")


def test_an_event_with_telemetry_off_builds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setattr(telemetry, "create_event", telemetry.create_event)  # restored after
    monkeypatch.setattr(platform, "architecture", _probed)
    telemetry_off.install()
    done = telemetry.event(telemetry.EventType.FLWR_CLIENTAPP_RUN_ENTER)
    assert done.result(timeout=10) == ""
    assert telemetry_off.problems() == []


def test_with_telemetry_on_flowers_own_event_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry, "FLWR_TELEMETRY_ENABLED", "1")
    own = telemetry.create_event
    monkeypatch.setattr(telemetry, "create_event", own)
    telemetry_off.install()
    assert telemetry.create_event is own

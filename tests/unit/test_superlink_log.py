"""fl-superlink's log: Flower's line per poll and per reply of every node is left out."""

from __future__ import annotations

import logging

import pytest

from fl_system.runtime import superlink


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("flwr", logging.INFO, __file__, 1, message, ("123",), None)


@pytest.mark.parametrize(
    ("message", "kept"),
    [
        ("[Fleet.PullMessages] node_id=%s", False),
        ("[Fleet.PushMessages] Push replies from node_id=%s", False),
        ("[Fleet.PushMessages] No replies to push", False),
        ("[Fleet.ActivateNode] Activated node_id=%s", True),
        ("[fl_system] round 3/5 | acc 0.9", True),
    ],
)
def test_per_node_lines_are_left_out_and_the_rest_kept(message: str, kept: bool) -> None:
    assert superlink.quiet_polls(_record(message)) is kept


def test_an_unknown_log_level_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv(superlink.LOG_ENV, "loud")
    assert superlink.main([]) == 2
    assert capsys.readouterr().err == (
        "fl-superlink: error: FL_LOG_LEVEL must be one of debug, info, warning, got 'loud'\n"
    )

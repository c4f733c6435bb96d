"""The audit log: whole lines appended, the runs' owners read back by a restarted server."""

from __future__ import annotations

from pathlib import Path

import pytest

from fl_system.access import audit


def test_a_restarted_server_knows_who_submitted_each_run(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = audit.AuditLog(path)
    log.append(audit.entry("sam", "submitter", "start-run", audit.OK, 7, "ab12"))
    log.append(audit.entry("vic", "viewer", "start-run", "refused: no", None))
    log.append(audit.entry("ana", "admin", "stop-run", audit.OK, 7))
    again = audit.AuditLog(path)
    assert (again.owner(7), again.owner(8)) == ("sam", None)
    lines = list(audit.read(path))
    assert [line["who"] for line in lines] == ["sam", "vic", "ana"]
    assert list(lines[0]) == list(audit.FIELDS)
    assert audit.format_line(lines[1]).split("  ")[1:] == [
        "vic", "viewer", "start-run", "-", "-", "-", "refused: no"
    ]  # fmt: skip
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_a_line_that_is_not_json_is_reported_with_its_number(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    path.write_text('{"who": "a"}\nnot json\n')
    with pytest.raises(ValueError, match=r"audit\.jsonl:2: not an audit line"):
        list(audit.read(path))
    assert list(audit.read(tmp_path / "none.jsonl")) == []

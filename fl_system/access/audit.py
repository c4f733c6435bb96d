"""The Control API's audit log: one JSON line per call, appended, never rewritten.

Each line says when, who (the operator, or "-" when no operator was recognised), its role,
what (the Control API call), the run it concerns, the hash of the app it submitted and the
operator who signed that app (`fl_system.access.app_signature`), and the result ("ok", or
"refused: " and why). Lines are written whole with one `write` to a file opened for
appending, so a reader, a crash or a second writer never leaves half a line. The log also
says who submitted each run (the owner a submitter must be to read or stop it).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

FIELDS = ("when", "who", "role", "what", "run_id", "fab_hash", "signer", "result")
OK = "ok"


def entry(
    who: str,
    role: str,
    what: str,
    result: str,
    run_id: int | None = None,
    fab_hash: str = "",
    signer: str = "",
) -> dict[str, object]:
    """One audit line's fields, stamped now (UTC)."""
    when = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")
    values = (when, who, role, what, run_id, fab_hash, signer, result)
    return dict(zip(FIELDS, values, strict=True))


class AuditLog:
    """The audit file at `path` (created 0600), and the owner of each run submitted.

    Parameters
    ----------
    path : Path
        JSON lines; what is there already is kept, and read for the runs' owners.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._owners = {int(e["run_id"]): str(e["who"]) for e in read(path)
                        if e.get("what") == "start-run" and e.get("result") == OK
                        and e.get("run_id") is not None}  # fmt: skip

    def append(self, line: dict[str, object]) -> None:
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if line["what"] == "start-run" and line["result"] == OK and line["run_id"] is not None:
                self._owners[int(line["run_id"])] = str(line["who"])
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)

    def owner(self, run_id: int) -> str | None:
        """The operator who submitted run `run_id` (None: not submitted through this log)."""
        with self._lock:
            return self._owners.get(run_id)


def read(path: Path) -> Iterator[dict[str, object]]:
    """The lines of an audit log, oldest first (none when there is no file)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return
    for number, line in enumerate(text.splitlines(), 1):
        try:
            yield json.loads(line)
        except ValueError:
            raise ValueError(f"{path}:{number}: not an audit line") from None


def format_line(line: dict[str, object]) -> str:
    """One audit line for a terminal: its fields in order, '-' for those it lacks."""
    values = [line.get(field) for field in FIELDS]
    return "  ".join("-" if value in (None, "") else str(value) for value in values)

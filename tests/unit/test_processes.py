"""Child processes' logs: every line, in order, without terminal colour codes."""

from __future__ import annotations

import sys
from pathlib import Path

from fl_system.launch.processes import ProcessGroup, tool_env


def test_a_childs_log_keeps_its_lines_and_drops_colour_codes(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "print('\\x1b[92mINFO \\x1b[0m:      [fl_system] round 1/2 | acc 0.5000', flush=True)\n"
        "print('\\x1b[1;31mERROR\\x1b[0m: plain \\x1b[2K text', flush=True)\n"
        "sys.stdout.write('a last line without its end')\n"
    )
    log = tmp_path / "logs" / "child.log"
    procs = ProcessGroup()
    try:
        child = procs.start("child", [sys.executable, "-c", script], log, tool_env(), plain=True)
        child.wait(timeout=30)
        procs.drain(child)
    finally:
        procs.stop()
    assert log.read_text() == (
        "INFO :      [fl_system] round 1/2 | acc 0.5000\n"
        "ERROR: plain  text\n"
        "a last line without its end"
    )

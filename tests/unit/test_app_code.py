"""A ClientApp task keeps the app its launcher imported only when the run's FAB carries the
same code, file for file: the fingerprint, kept once per installed FAB, and the choice a
launcher's child makes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from fl_system.runtime.launch.components import app_dir
from fl_system.runtime.supernode import app_code


def _tree(root: Path) -> Path:
    for package in app_code.APP_PACKAGES:
        (root / package / "sub").mkdir(parents=True)
        (root / package / "__init__.py").write_text(f"NAME = {package!r}\n")
        (root / package / "sub" / "rule.py").write_text("STEP = 0.1\n")
    return root


def test_the_fingerprint_follows_every_python_file_and_nothing_else(tmp_path: Path) -> None:
    one = _tree(tmp_path / "one")
    two = tmp_path / "two"
    shutil.copytree(one, two)
    assert app_code.code_digest(one) == app_code.code_digest(two)
    (two / "fl_system" / "notes.txt").write_text("not code")
    assert app_code.code_digest(one) == app_code.code_digest(two)
    (two / "client_app" / "sub" / "rule.py").write_text("STEP = 0.2\n")
    assert app_code.code_digest(one) != app_code.code_digest(two)
    shutil.rmtree(two)
    shutil.copytree(one, two)
    (two / "server_app" / "extra.py").write_text("")
    assert app_code.code_digest(one) != app_code.code_digest(two)


def test_an_installed_fab_is_fingerprinted_once(tmp_path: Path) -> None:
    fab = _tree(tmp_path / "fab")
    first = app_code.fab_digest(fab)
    assert (fab / app_code.DIGEST_FILE).read_text() == first == app_code.code_digest(fab)
    (fab / "client_app" / "__init__.py").write_text("changed = True\n")  # FABs never change
    assert app_code.fab_digest(fab) == first


def test_this_installation_fingerprints_the_apps_it_imports() -> None:
    root = app_dir()
    assert app_code.warm_apps(None, ("client_app.app:app",)) is None
    assert app_code.warm_apps(root, ("client_app.app:app",)) == app_code.code_digest(root)
    assert "client_app.app" in sys.modules


CHILD = """
import json, sys
from pathlib import Path
from fl_system.runtime.supernode import launcher
import client_app.app
fab = Path(sys.argv[1])
launcher._same_code_or_drop((fab / ".fl_code_digest").read_text(), fab)
kept = "client_app.app" in sys.modules and "fl_system.runtime" in sys.modules
launcher._same_code_or_drop("another", fab)
left = [m for m in sys.modules if m.split(".")[0] in ("fl_system", "client_app", "server_app")]
print(json.dumps([kept, left]))
"""


def test_a_task_keeps_the_launchers_apps_only_for_a_fab_of_the_same_code(tmp_path: Path) -> None:
    fab = _tree(tmp_path / "fab")
    app_code.fab_digest(fab)
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(fab)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert json.loads(done.stdout.splitlines()[-1]) == [True, []]

"""The layers: fl_system is the core both apps import (no module of it imports server_app or
client_app, at module level, inside a function, by importlib, or through another module), its
rooms import only the rooms below them, and the apps never import each other (import-linter's
contracts in pyproject.toml)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fl_system

APPS = ("server_app", "client_app")
CORE = Path(fl_system.__file__).resolve().parent


def _imported_names(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every import statement and importlib/__import__ call with a literal."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif isinstance(node, ast.Call) and node.args:
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            first = node.args[0]
            if name in ("import_module", "__import__") and isinstance(first, ast.Constant):
                found.append((node.lineno, str(first.value)))
    return found


def _app_imports(source: str) -> list[str]:
    return [
        f"line {line}: {module}"
        for line, module in _imported_names(ast.parse(source))
        if module.split(".")[0] in APPS
    ]


def test_no_core_module_imports_an_app_at_any_place_in_its_source() -> None:
    offenders = {
        str(path.relative_to(CORE.parent)): found
        for path in sorted(CORE.rglob("*.py"))
        if (found := _app_imports(path.read_text()))
    }
    assert offenders == {}


def test_the_source_check_sees_imports_inside_functions_and_by_importlib() -> None:
    source = (
        "import os\n"
        "def run():\n"
        "    from client_app.app import app\n"
        "    import server_app.app as s\n"
        "    importlib.import_module('server_app.driver')\n"
        "    from fl_system import protocol\n"
    )
    assert _app_imports(source) == [
        "line 3: client_app.app",
        "line 4: server_app.app",
        "line 5: server_app.driver",
    ]


def test_importing_every_core_module_loads_neither_app() -> None:
    """Transitive imports too: every module of fl_system, imported in a fresh interpreter."""
    script = (
        "import importlib, json, pkgutil, sys\n"
        "import fl_system\n"
        "for m in pkgutil.walk_packages(fl_system.__path__, 'fl_system.'):\n"
        "    importlib.import_module(m.name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "fl_system" in loaded
    assert loaded.isdisjoint(APPS)


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    """import-linter's contracts (pyproject.toml) on the packages under `root`."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "lint-imports"), "--no-cache"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy_of_the_project(into: Path) -> Path:
    for name in ("fl_system", *APPS):
        shutil.copytree(CORE.parent / name, into / name)
    shutil.copy(CORE.parent / "pyproject.toml", into)
    return into


def test_the_import_contracts_hold() -> None:
    done = _lint_imports(CORE.parent)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Contracts: 3 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "line", "broken", "summary"),
    [
        (
            "fl_system/learning/score.py",
            "from fl_system.records import run_dir",
            "fl_system.learning is not allowed to import fl_system.records",
            "2 kept, 1 broken",
        ),
        (  # through the driver, data imports the rooms above it; the ClientApp imports
            "fl_system/data/files.py",  # fl_system.data.files, and through it the ServerApp
            "import server_app.driver",
            "fl_system.data.files -> server_app.driver",
            "0 kept, 3 broken",
        ),
        (
            "client_app/app.py",
            "from server_app import exchange",
            "client_app is not allowed to import server_app",
            "2 kept, 1 broken",
        ),
    ],
)
def test_an_import_against_the_layers_breaks_a_contract(
    tmp_path: Path, module: str, line: str, broken: str, summary: str
) -> None:
    """An upward import, the core importing an app, an app importing the other: each named."""
    copy = _copy_of_the_project(tmp_path)
    with (copy / module).open("a") as source:
        source.write(f"\n{line}  # noqa\n")
    done = _lint_imports(copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"Contracts: {summary}." in done.stdout
    assert broken in done.stdout

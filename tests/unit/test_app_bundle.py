"""The app directory `flwr run` gets: exactly the files of Flower's own FAB, found fast."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from flwr.cli.build import build_fab_from_disk

from fl_system.runtime.launch.app_bundle import app_files, stage_app
from fl_system.runtime.launch.components import app_dir

PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "tiny-app"
version = "1.0.0"
dependencies = []

[tool.flwr.app]
publisher = "tests"

[tool.flwr.app.components]
serverapp = "pkg.server:app"
clientapp = "pkg.client:app"
"""


def _fab_hash(root: Path) -> str:
    return hashlib.sha256(build_fab_from_disk(root)).hexdigest()


def _write(root: Path, rel: str, text: str = "x = 1\n") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_tree_with_ignored_folders_negations_and_links_gives_flowers_fab(
    tmp_path: Path,
) -> None:
    app = tmp_path / "app"
    _write(app, "pyproject.toml", PYPROJECT)
    _write(app, ".gitignore", ".venv/\nbuild/\n*.npz\n!/keep/*.npz\ncache/\n!cache/wanted.json\n")
    _write(app, "pkg/server.py")
    _write(app, "pkg/client.py")
    _write(app, "pkg/conf/a.yaml", "a: 1\n")
    _write(app, "pkg/__pycache__/server.cpython-311.py")  # Flower's excludes
    _write(app, ".venv/lib/site.py")  # ignored folder: never walked
    _write(app, "build/gen.py")
    _write(app, "keep/data.npz.json", "{}")
    _write(app, "keep/ok.py")
    _write(app, "cache/wanted.json", "{}")  # re-included inside an ignored folder
    _write(app, "cache/other.json", "{}")
    _write(app, "notes.txt", "not a FAB file type")
    (tmp_path / "outside.py").write_text("y = 2\n")
    os.symlink(tmp_path / "outside.py", app / "pkg" / "link.py")  # links are skipped

    staged = stage_app(app, tmp_path / "staged")

    assert _fab_hash(staged) == _fab_hash(app)
    assert set(app_files(app)) == {
        ".gitignore",
        "pyproject.toml",
        "pkg/server.py",
        "pkg/client.py",
        "pkg/conf/a.yaml",
        "keep/data.npz.json",
        "keep/ok.py",
        "cache/wanted.json",
    }


def test_staging_replaces_what_an_earlier_stage_left(tmp_path: Path) -> None:
    app = tmp_path / "app"
    _write(app, "pyproject.toml", PYPROJECT)
    _write(app, "pkg/server.py")
    dest = tmp_path / "staged"
    _write(dest, "pkg/stale.py")
    stage_app(app, dest)
    assert not (dest / "pkg" / "stale.py").exists()
    assert _fab_hash(dest) == _fab_hash(app)


def test_this_project_stages_to_the_fab_flower_builds_from_its_root(tmp_path: Path) -> None:
    """The real app, virtual environment and all: the same FAB, byte for byte."""
    root = app_dir()
    assert _fab_hash(stage_app(root, tmp_path / "staged")) == _fab_hash(root)

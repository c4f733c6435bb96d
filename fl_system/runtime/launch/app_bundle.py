"""The app directory `flwr run` is given: only the files Flower packs into the FAB.

`flwr run <dir>` walks every file under the directory before it applies `.gitignore`, and the
project's root holds a virtual environment of ~50,000 files: seconds of every run's start-up
(more with the nodes starting beside it). We walk the same tree without descending into the
folders Flower would drop anyway, apply Flower's own filter to what is left, and copy the
result into a small directory: the FAB built from it is byte-identical.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from flwr.cli.utils import build_pathspec, filter_paths_for_publish, load_gitignore_patterns
from flwr.supercore.constant import APP_PUBLISH_EXCLUDE_PATTERNS

_GLOB = re.compile(r"[*?\[]")


def app_files(root: Path) -> dict[str, Path]:
    """Relative POSIX path -> file, exactly the files Flower's FAB build keeps from `root`."""
    patterns = load_gitignore_patterns(root / ".gitignore")
    dropped = build_pathspec([*patterns, *APP_PUBLISH_EXCLUDE_PATTERNS])
    kept_again = [p[1:].lstrip("/") for p in patterns if p.startswith("!")]
    files: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        rel = here.relative_to(root).as_posix()
        prefix = "" if rel == "." else f"{rel}/"
        dirnames[:] = [
            d
            for d in dirnames
            if not (here / d).is_symlink()
            and not _dropped_whole(f"{prefix}{d}/", dropped, kept_again)
        ]
        for name in filenames:
            path = here / name
            if not path.is_symlink():
                files[f"{prefix}{name}"] = path
    return filter_paths_for_publish(files)  # type: ignore[return-value]


def _dropped_whole(folder: str, dropped: object, kept_again: list[str]) -> bool:
    """A folder every file of which Flower drops: matched by .gitignore or Flower's excludes,
    and not reachable by a negated pattern (`!/tests/data/*.npz`)."""
    if not dropped.match_file(f"{folder}probe"):  # type: ignore[attr-defined]
        return False
    for pattern in kept_again:
        literal = _GLOB.split(pattern, maxsplit=1)[0]
        if "/" not in literal or literal.startswith(folder) or folder.startswith(literal):
            return False  # it may re-include a file in this folder: walk it
    return True


def stage_app(root: Path, dest: Path) -> Path:
    """Copy the app's FAB files from `root` into `dest` (emptied first); returns `dest`."""
    shutil.rmtree(dest, ignore_errors=True)
    for rel, path in app_files(root).items():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
    return dest

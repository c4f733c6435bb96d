"""The manifest of the FAB `flwr run` builds from an app's folder, for signing it.

`flwr run APP` builds the FAB with `flwr.cli.build.build_fab_from_disk` (deterministic: fixed
file dates, sorted paths) and writes a manifest of every file into it (`.info/CONTENT`). So
the manifest is computed here by Flower's own build, on the folder's files with a
placeholder for the signature, whose line also tells whether the signature goes into the
FAB by Flower's own include rules (the app's `fab-include`, Flower's built-in patterns).
"""

from __future__ import annotations

import importlib
import inspect
import io
import tomllib
import zipfile
from pathlib import Path

import tomli_w

CONTENT = ".info/CONTENT"


def problems() -> list[str]:
    """What moved in the installed flwr of its FAB build."""
    try:
        from flwr.cli import build
        from flwr.cli.utils import collect_files

        run = importlib.import_module("flwr.cli.run.run")  # the package's `run` is a function
    except ImportError as err:
        return [f"Flower's FAB build moved ({err})"]
    found = []
    if "build_fab_from_disk(app)" not in inspect.getsource(run):
        found.append("flwr run no longer builds its FAB with build_fab_from_disk")
    if f'"{CONTENT}"' not in inspect.getsource(build.build_fab_from_files):
        found.append(f"Flower's FAB build no longer writes {CONTENT}")
    if not callable(collect_files) or not callable(getattr(build, "build_fab_from_files", 0)):
        found.append("Flower's FAB build no longer has collect_files, build_fab_from_files")
    return found


def manifest(app: Path, placeholder: str) -> str:
    """The `.info/CONTENT` of the FAB `flwr run` builds from `app` with a file `placeholder`
    at its top (`{}`, to be replaced by the signature: the other lines do not depend on it);
    ValueError (Flower's message) for a folder flwr cannot build."""
    from flwr.cli.build import build_fab_from_files
    from flwr.cli.utils import collect_files

    files: dict[str, Path | bytes] = dict(collect_files(app.resolve()))
    files[placeholder] = b"{}"
    fab, _ = build_fab_from_files(files)
    with zipfile.ZipFile(io.BytesIO(fab)) as archive:
        return archive.read(CONTENT).decode()


def include(app: Path, pattern: str) -> None:
    """Add `pattern` to the `fab-include` of `app`'s pyproject.toml, if it has one (without,
    Flower's built-in patterns decide)."""
    project = app / "pyproject.toml"
    config = tomllib.loads(project.read_text())
    app_conf = config.get("tool", {}).get("flwr", {}).get("app", {})
    if "fab-include" in app_conf and pattern not in app_conf["fab-include"]:
        app_conf["fab-include"] = [*app_conf["fab-include"], pattern]
        project.write_text(tomli_w.dumps(config))

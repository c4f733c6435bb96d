"""ARCHITECTURE.md stays true: every path it names exists, and its table of fl_system's rooms
is the import contract's list of layers."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "ARCHITECTURE.md"
# a path in backticks: a known top folder or file, then any run of path characters
PATH = re.compile(
    r"`((?:fl_system|server_app|client_app|conf|tests|benchmarks|docker|examples)"
    r"(?:/[\w.<>-]+)*/?|pyproject\.toml|README\.md)`"
)


def named_paths(text: str) -> list[str]:
    """The concrete paths the text names (templates such as `<name>.py` left out)."""
    return sorted({p for p in PATH.findall(text) if "<" not in p})


def test_every_path_architecture_md_names_exists() -> None:
    paths = named_paths(DOC.read_text())
    assert len(paths) > 60  # the journey, the features and the checklists name files
    assert [p for p in paths if not (ROOT / p).exists()] == []


def test_the_path_check_sees_a_path_that_is_not_there() -> None:
    text = "the driver (`server_app/driver.py`) and `fl_system/learning/gone.py`, `<name>.py`"
    found = named_paths(text)
    assert found == ["fl_system/learning/gone.py", "server_app/driver.py"]
    assert [p for p in found if not (ROOT / p).exists()] == ["fl_system/learning/gone.py"]


def test_its_rooms_are_the_layers_import_linter_checks() -> None:
    """The rooms of the layers table, top to bottom, are the contract's layers."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in config["contracts"] if c["id"] == "layers"]
    contract = [sorted(name.strip() for name in layer.split("|")) for layer in layers]
    text = DOC.read_text()
    table = text[text.index("| room | job | may import |") : text.index("```")]
    rows = [line for line in table.splitlines() if line.startswith("| `fl_system/")]
    documented = [
        sorted(re.sub(r"\.py$", "", p).removeprefix("fl_system/").rstrip("/") for p in paths)
        for paths in (re.findall(r"`(fl_system/[\w./]+)`", row.split(" | ")[0]) for row in rows)
    ]
    assert documented == contract

"""The Flower app this project is: its root and the components its pyproject.toml declares.

The launcher names the ServerApp and the ClientApp as Flower does, by the component references
under `[tool.flwr.app.components]` (`server_app.app:app`), and never imports them itself.
"""

from __future__ import annotations

from pathlib import Path

from flwr.common.config import get_project_config

import fl_system
from fl_system.runtime.launch import LaunchError


def app_dir() -> Path:
    """The Flower app (this project's root): where pyproject.toml declares the components."""
    root = Path(fl_system.__file__).resolve().parent.parent
    if not (root / "pyproject.toml").is_file():
        raise LaunchError(
            f"no pyproject.toml next to the fl_system package ({root}); install the project "
            "from its source tree with `pip install -e .`"
        )
    return root


def components(root: Path) -> tuple[str, str]:
    """(serverapp, clientapp): the app's component references, e.g. `server_app.app:app`."""
    declared = get_project_config(root)["tool"]["flwr"]["app"]["components"]
    return str(declared["serverapp"]), str(declared["clientapp"])

"""The ServerApp: reads the experiment config from the run config and drives the rounds."""

from __future__ import annotations

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from fl_system.messages import protocol
from fl_system.settings.config_nodes import config_from_json
from server_app.driver import RoundDriver


def serve(grid: Grid, run_config_json: str) -> None:
    """Everything a run does on the server, whatever started it."""
    if not run_config_json:
        raise ValueError(
            f"run config '{protocol.RUN_CONFIG}' is empty: start runs with fl-run, "
            "which fills it in"
        )
    RoundDriver(grid, config_from_json(run_config_json)).run()


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    serve(grid, str(context.run_config.get(protocol.RUN_CONFIG, "")))

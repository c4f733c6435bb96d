"""A tracked run as a researcher sees it: a 10-round simulation logged with tracking=mlflow,
`mlflow server` on loopback over its SQLite store, and the run's accuracy chart opened in
headless Chromium (Debian's `chromium`), saved as `mlflow_run.png`. Run by hand (about a
minute: the server takes ~15 s to start, the page ~10 s to render), not in CI.

    python -m benchmarks.tracking.screenshot [--out benchmarks/tracking/mlflow_run.png]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from benchmarks.harness.fl_run import ROOT, BenchmarkError, run_fl
from fl_system.launch.processes import free_port, tool_env

RUN = ["runtime=simulation", "num_rounds=10", "tracking=mlflow"]
SERVER = ["mlflow", "server", "--host", "127.0.0.1", "--workers", "1"]
# root needs --no-sandbox; the budget lets the page's scripts fetch and draw before the shot
CHROMIUM = ["--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars"]
CHROMIUM += ["--window-size=1600,1000", "--virtual-time-budget=20000"]
EXPERIMENT_ID = "1"  # the first experiment a new store creates (0 is MLflow's Default)


def serve(store: Path, port: int, log: Path) -> subprocess.Popen:
    server = subprocess.Popen(
        [*SERVER, "--backend-store-uri", f"sqlite:///{store}", "--port", str(port)],
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        env=tool_env(),
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
            return server
        except OSError:
            if server.poll() is not None:
                raise BenchmarkError(f"mlflow server exited: {log.read_text()[-2000:]}") from None
            time.sleep(0.5)
    raise BenchmarkError("mlflow server did not answer in 120 s")


def metric_page(port: int, run_id: str) -> str:
    """MLflow's page of one metric of one run: its chart against the step (the round)."""
    query = {
        "runs": json.dumps([run_id]),
        "metric": json.dumps("test_accuracy"),
        "experiments": json.dumps([EXPERIMENT_ID]),
        "plot_metric_keys": json.dumps(["test_accuracy"]),
        "x_axis": "step",
    }
    return f"http://127.0.0.1:{port}/#/metric?{urllib.parse.urlencode(query)}"


def screenshot(url: str, out: Path) -> None:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise BenchmarkError("no chromium: apt-get install chromium")
    subprocess.run(
        [chromium, *CHROMIUM, f"--screenshot={out}", url],
        check=True,
        capture_output=True,
        timeout=180,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/tracking/mlflow_run.png")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-tracking-ui-") as tmp:
        work = Path(tmp)
        run_dir = work / "run"
        run_fl(
            ["fl-run", *RUN, f"hydra.run.dir={run_dir}"],
            work / "run.out",
            600,
            tool_env(),
            cwd=work,
        )
        run_id = json.loads((run_dir / "tracking.json").read_text())["mlflow"]["id"]
        port = free_port()
        server = serve(work / "mlflow.db", port, work / "server.log")
        try:
            url = metric_page(port, run_id)
            screenshot(url, args.out.resolve())
        finally:  # the server and its workers: its own session, started here
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
    print(f"{url}\nscreenshot: {args.out}")


if __name__ == "__main__":
    main()

"""A tracked sweep as a researcher sees it: FedAvg and FedProx at seeds 0 and 1, 10 rounds
each, logged with tracking=mlflow, `mlflow server` on loopback over its SQLite store, and
three pages opened in headless Chromium (Debian's `chromium`) in MLflow's model-training view:
the experiment's runs (the sweep's parent run, its members folded under it), its logged
models (each member's final model, with its run's name: "fedprox seed=1"), and one run's
accuracy chart: `mlflow_runs.png`, `mlflow_models.png`, `mlflow_run.png` beside this file.
Run by hand (about three minutes: the server takes ~15 s to start, each page ~10 s to
render), not in CI.

    python -m benchmarks.tracking.screenshot [--out-dir benchmarks/tracking]
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
from fl_system.runtime.launch.ports import free_port
from fl_system.runtime.launch.processes import tool_env

SWEEP = ["runtime=simulation", "num_rounds=10", "tracking=mlflow", "algorithm=fedavg,fedprox"]
SWEEP += ["seed=0,1"]
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
        "workflowType": "machine_learning",
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
    parser.add_argument("--out-dir", type=Path, default=ROOT / "benchmarks/tracking")
    args = parser.parse_args()
    out = args.out_dir.resolve()
    with tempfile.TemporaryDirectory(prefix="bench-tracking-ui-") as tmp:
        work = Path(tmp)
        sweep = work / "sweep"
        run_fl(
            ["fl-run", "-m", *SWEEP, f"hydra.sweep.dir={sweep}"],
            work / "run.out",
            900,
            tool_env(),
            cwd=work,
        )
        first = min(p for p in sweep.iterdir() if (p / "tracking.json").is_file())
        run_id = json.loads((first / "tracking.json").read_text())["mlflow"]["id"]
        port = free_port()
        server = serve(work / "mlflow.db", port, work / "server.log")
        base = f"http://127.0.0.1:{port}/#/experiments/{EXPERIMENT_ID}"
        view = "workflowType=machine_learning"  # the UI's own toggle, GenAI unless asked
        pages = {
            "mlflow_runs.png": f"{base}/runs?{view}",
            "mlflow_models.png": f"{base}/models?{view}",
            "mlflow_run.png": metric_page(port, run_id),
        }
        try:
            for name, url in pages.items():
                screenshot(url, out / name)
                print(f"{url}\nscreenshot: {out / name}", flush=True)
        finally:  # the server and its workers: its own session, started here
            os.killpg(server.pid, signal.SIGINT)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()


if __name__ == "__main__":
    main()

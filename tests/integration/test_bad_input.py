"""Bad input ends with one clear error line, a non-zero exit and no process left behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.integration.conftest import QUICK, run_cli
from tests.integration.fl_run_fork import FL_RUN

pytestmark = pytest.mark.integration


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "error" in line.lower()]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["num_rounds=-1"], "num_rounds must be a positive integer, got -1"),
        (
            ["algorithm=scaffold", "privacy=central_fixed"],
            "privacy=central_fixed does not compose with algorithm=scaffold: its replies carry",
        ),
        (["dataset=digits", "model=mlp", "num_clients=5000"], "5000"),
        (["dataset=digits", "model=cnn"], "cnn: model 'cnn' needs images"),
        (["algorithm=fedprox", "algorithm.mu=-1"], "algorithm.mu must be a number >= 0, got -1"),
        (["algorithm=feddisco", "algorithm.disco.a=-1"], "disco.a must be a number >= 0"),
        (
            [
                "algorithm=scaffold",
                "algorithm.disco.enabled=true",
                "algorithm.disco.metric=hamming",
            ],
            "disco.metric must be one of kl, l1, l2, cosine, got 'hamming'",
        ),
        (
            ["algorithm=fednova", "algorithm.gsnr.enabled=true", "train.local_steps=5"],
            "algorithm.gsnr.enabled=true cannot be used with fednova: FedNova divides",
        ),
        (
            ["algorithm=fedgsnr", "train.local_steps=5", "algorithm.gsnr.samples=0"],
            "algorithm.gsnr.samples must be an integer >= 1, got 0",
        ),
        (
            ["algorithm=fedgsnr", "train.local_steps=5", "algorithm.gsnr.allocation=greedy"],
            "algorithm.gsnr.allocation must be one of matched, scaled, got 'greedy'",
        ),
        (["algorithm=fedgsnr"], "algorithm.gsnr needs train.local_steps (E_const"),
        (
            ["compression.up=st", "compression.up.q=0"],
            "compression.up: q must be a fraction in (0, 1], got 0",
        ),
        (["compression.up=topk", "compression.up.q=1.5"], "compression.up: q must be a fraction"),
        (
            ["compression.up=qsgd", "compression.up.levels=0"],
            "compression.up: levels must be an integer >= 1, got 0",
        ),
        (["compression.up=zip"], "compression.up=zip: no such option; choose one of fp16, none"),
        (["algorithm=efl", "algorithm.lam=-1"], "algorithm.lam must be a number >= 0, got -1"),
        (
            ["algorithm=efl", "algorithm.fisher_comm=zip"],
            "algorithm.fisher_comm must be one of dense, fp16, topk, got 'zip'",
        ),
        (
            ["train.local_steps=5", "stragglers.incomplete=1.5"],
            "stragglers.incomplete must be a probability in [0, 1], got 1.5",
        ),
        (
            ["train.local_steps=5", "stragglers.inactive=-0.1"],
            "stragglers.inactive must be a probability in [0, 1], got -0.1",
        ),
        (
            ["client_eval.enabled=true", "client_eval.test_fraction=1"],
            "client_eval.test_fraction must be a number in (0, 1), got 1",
        ),
        (
            ["compression.down=st", "compression.server_apply=literal"],
            "compression.server_apply must be recommended or full, got 'literal'",
        ),
        (
            ["algorithm=taco", "train.local_steps=5", "algorithm.kappa=1.5"],
            "algorithm.kappa must be a number in (0, 1], got 1.5",
        ),
        (
            ["algorithm=taco", "train.local_steps=5", "algorithm.gamma=-1"],
            "algorithm.gamma must be null (1 / K) or a number >= 0, got -1",
        ),
        (
            ["algorithm=taco", "train.local_steps=5", "algorithm.lam=0"],
            "algorithm.lam must be null (T / 5, at least 3) or an integer >= 1, got 0",
        ),
        (
            ["algorithm=fedcat", "algorithm.k=5"],
            "algorithm.k must be in 1..4 (the clients), got 5",
        ),
        (
            ["algorithm=fedcat", "algorithm.eps=1.5"],
            "algorithm.eps must be a number in [0, 1], got 1.5",
        ),
        (["algorithm=fedcat", "algorithm.lam=0"], "algorithm.lam must be an integer >= 1, got 0"),
        (
            ["algorithm=fedcat", "algorithm.k=2"],
            "num_rounds (5) must be a multiple of algorithm.k (2)",
        ),
        (["algorithm=fedadam", "algorithm.eta=0"], "algorithm.eta must be a number > 0, got 0"),
        (
            ["algorithm=fedyogi", "algorithm.beta_1=1.5"],
            "algorithm.beta_1 must be a number in [0, 1), got 1.5",
        ),
        (["algorithm=fedadagrad", "algorithm.tau=-1"], "algorithm.tau must be a number > 0"),
        (
            ["algorithm=fedadam", "algorithm.eta_l=0.1"],
            "algorithm.eta_l is the clients' learning rate, train.lr (0.05): set train.lr=0.1",
        ),
        (
            ["clients.freeloaders.ids=[0,4]"],
            "clients.freeloaders.ids must be a list of partition ids in 0..3, got [0, 4]",
        ),
        (
            ["system=mobile", "system.uplink_mbps.median=-5"],
            "system.uplink_mbps must be {median: a positive number of Mbit/s, sigma: a number",
        ),
    ],
)
def test_bad_values(args: list[str], expected: str, tmp_path: Path, cli_env) -> None:
    result = run_cli([*args, f"hydra.run.dir={tmp_path / 'run'}"], cli_env, timeout=120)
    assert result.returncode == 2
    errors = _error_lines(result.stderr)
    assert len(errors) == 1 and expected in errors[0], result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "run").exists()  # nothing was started, nothing left behind


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["dataset=nonesuch"], "dataset=nonesuch: no such option; choose one of app, cifar10,"),
        (["algorithm=nonesuch"], "algorithm=nonesuch: no such option; choose one of efl,"),
        (["partition.alpha=-1"], "partition.alpha: partition=iid has no setting 'alpha'"),
        (["num_rounds=1=2"], "num_rounds=1=2: Hydra cannot read this override"),
    ],
)
def test_unknown_names_are_one_line_with_the_choices(
    args: list[str], expected: str, tmp_path: Path, cli_env
) -> None:
    result = run_cli([*args, f"hydra.run.dir={tmp_path / 'run'}"], cli_env, timeout=120)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"fl-run: error: {result.stderr[15:].strip()}"]
    assert result.stderr.startswith(f"fl-run: error: {expected}")
    assert not (tmp_path / "run").exists()


def test_corrupt_checkpoint_with_resume(tmp_path: Path, cli_env) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint.npz").write_bytes(b"PK\x03\x04 definitely not a checkpoint")
    result = run_cli([*QUICK, "resume=true", f"hydra.run.dir={run_dir}"], cli_env, timeout=120)
    assert result.returncode == 2
    errors = _error_lines(result.stderr)
    assert len(errors) == 1 and "corrupt or unreadable" in errors[0], result.stderr
    assert not (run_dir / "logs").exists()


def test_existing_run_is_not_overwritten(tmp_path: Path, cli_env) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "checkpoint.npz").write_bytes(b"keep me")
    result = run_cli([*QUICK, f"hydra.run.dir={run_dir}"], cli_env, timeout=120)
    assert result.returncode == 2
    assert "already holds a run; pass resume=true" in result.stderr
    assert (run_dir / "checkpoint.npz").read_bytes() == b"keep me"


def test_an_unreachable_superlink_gives_up_after_the_countdown(tmp_path: Path, cli_env) -> None:
    remote = ["runtime=remote", "runtime.address=127.0.0.1:1", "runtime.insecure=true"]
    result = run_cli(
        [*QUICK, *remote, "runtime.connect_timeout=3", f"hydra.run.dir={tmp_path / 'run'}"],
        cli_env,
        timeout=120,
    )
    assert result.returncode == 1
    assert "fl-run: waiting for 127.0.0.1:1 (Connection refused); giving up in 3 s" in (
        result.stderr
    )
    errors = _error_lines(result.stderr)
    assert errors == [
        "fl-run: error: SuperLink Control API: cannot reach 127.0.0.1:1 after 3 s "
        "(Connection refused); check the address and port, that the server runs, and the firewall"
    ]


def test_a_run_refused_by_validation_leaves_no_outputs_folder(tmp_path: Path, cli_env) -> None:
    """The default run directory (outputs/<date>/<time>-...) is made by Hydra before any check:
    it goes again, with the folders made for it, while an existing one stays."""
    (tmp_path / "outputs" / "kept").mkdir(parents=True)
    for expected in (["kept"], []):
        if not expected:
            (tmp_path / "outputs" / "kept").rmdir()
        result = run_cli(["num_rounds=-1"], cli_env, timeout=120, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        outputs = tmp_path / "outputs"
        assert (sorted(p.name for p in outputs.iterdir()) if outputs.exists() else []) == expected


def test_a_refused_simulation_run_leaves_no_engine(tmp_path: Path, cli_env) -> None:
    """fl-run forks the simulation engine before it composes the config: a run refused after
    that ends the engine with it, though the engine is still importing (fl-run started by
    name, as a user starts it: its engine imports everything itself, ~2 s)."""
    marker = tmp_path / "refused"  # in the early engine's command line: fl-run's arguments
    args = [*QUICK, "runtime=simulation", "num_rounds=-1", f"hydra.run.dir={marker}"]
    result = subprocess.run(
        [FL_RUN, *args], env=cli_env, capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 2, result.stderr
    assert _running_with(str(marker)) == []


def _running_with(text: str) -> list[int]:
    """Live processes whose command line contains `text`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            zombie = (entry / "stat").read_text().rsplit(") ", 1)[1].startswith("Z")
        except (OSError, ValueError, IndexError):
            continue
        if text in cmdline and not zombie:
            found.append(int(entry.name))
    return found

"""A site's policy (`fl-client --policy`): what it accepts, decided from a run's own config,
its privacy bound the experiment's own account over all its rounds."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from omegaconf import DictConfig, OmegaConf

from fl_system.config.compose import compose_experiment
from fl_system.config.experiment import build_strategy
from fl_system.messages import protocol
from fl_system.privacy import PrivacyAccount
from fl_system.privacy.account import LocalAccount
from fl_system.privacy.planned import PlannedAccount, planned_account
from fl_system.runtime.supernode import site_policy
from fl_system.runtime.supernode.site_policy import SitePolicy
from fl_system.settings.config_nodes import config_from_json, config_to_json


def _run(overrides: list[str]) -> SimpleNamespace:
    """A run as the node's get_run gives it: the experiment's config in its run config."""
    cfg = compose_experiment(overrides)
    return SimpleNamespace(run_id=7, override_config={protocol.RUN_CONFIG: config_to_json(cfg)})


def _as_the_node_reads_it(overrides: list[str]) -> DictConfig:
    """The config as the node reads it from the run config, made editable."""
    cfg = config_from_json(config_to_json(compose_experiment(overrides)))
    return OmegaConf.create(OmegaConf.to_container(cfg))


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("mode", "rounds"), [("central_fixed", 1), ("central_fixed", 30), ("client_fixed", 12)]
)
def test_the_planned_account_is_what_the_servers_account_reports_after_every_round(
    mode: str, rounds: int
) -> None:
    cfg = compose_experiment([f"privacy={mode}", f"num_rounds={rounds}", "num_clients=8"])
    served = PrivacyAccount.for_run(cfg)
    for _ in range(rounds):
        reported = served.release()
    planned = planned_account(cfg, build_strategy(cfg).weighting_under_privacy())
    assert isinstance(planned, PlannedAccount)
    assert planned.epsilon == pytest.approx(reported, rel=1e-12)
    assert planned.delta == 1e-5


def test_local_dp_plans_its_most_exposed_client_sent_training_every_round() -> None:
    cfg = compose_experiment(["privacy=local", "privacy.epsilon=0.25", "num_rounds=12"])
    served = LocalAccount(epsilon=0.25, delta=1e-5)
    for _ in range(12):
        spent = served.release([0, 1, 2])
    planned = planned_account(cfg, None)
    assert isinstance(planned, PlannedAccount)
    assert (planned.epsilon, planned.delta) == pytest.approx(spent) == (3.0, 1.2e-4)


@pytest.mark.parametrize(
    ("overrides", "why"),
    [
        ([], "privacy=none: no differential privacy"),
        (["privacy=central_adaptive"], "covers fixed clipping only"),
        (["privacy=central_fixed", "privacy.accounting=false"], "privacy.accounting=false"),
        (["privacy=central_fixed", "privacy.noise_multiplier=0"], "no noise"),
        (["privacy=central_fixed", "privacy.reproducible_noise=true"], "epsilon is void"),
        (["privacy=local", "privacy.publish_client_stats=true"], "outside epsilon"),
    ],
)
def test_a_run_without_a_valid_account_has_its_reason_and_no_figure(
    overrides: list[str], why: str
) -> None:
    got = planned_account(compose_experiment(overrides), None)
    assert isinstance(got, str) and why in got


def test_a_weighting_the_accountant_does_not_cover_is_found_from_fl_systems_classes() -> None:
    cfg = compose_experiment(["algorithm=fednova", "privacy=central_fixed"])
    assert site_policy.weighting(cfg) == build_strategy(cfg).weighting_under_privacy()
    assert site_policy.weighting(compose_experiment([])) is None
    cfg = _as_the_node_reads_it([])
    cfg.algorithm.strategy._target_ = "os.system"  # never called, never imported
    with pytest.raises(LookupError, match=r"os\.system is not fl_system's"):
        site_policy.weighting(cfg)


def test_a_site_requiring_secagg_refuses_a_clear_run_and_takes_a_secaggplus_one() -> None:
    check = site_policy.policy_check(SitePolicy("site_b", secagg="secaggplus"))
    assert check(_run([])) == "site_b: requires secagg=secaggplus (this run has secagg=none)"
    assert check(_run(["secagg=secaggplus"])) is None


def test_a_site_with_a_maximum_epsilon_refuses_a_run_above_it_and_takes_one_below() -> None:
    policy = SitePolicy("site_c", max_epsilon=4.0)
    above = ["privacy=local", "privacy.epsilon=0.5", "num_rounds=10"]  # 5.0 over the run
    assert policy.refusal(compose_experiment(above)) == (
        "site_c: accepts at most epsilon <= 4 at delta <= 1e-05 over the run (this run's "
        "account: epsilon=5 at delta=0.0001, privacy=local, epsilon=0.5 per round over 10 "
        "rounds)"
    )
    below = ["privacy=local", "privacy.epsilon=0.5", "privacy.delta=1e-7", "num_rounds=8"]
    assert policy.refusal(compose_experiment(below)) is None
    assert policy.refusal(compose_experiment([])) == (
        "site_c: requires DP with epsilon <= 4 at delta <= 1e-05 over the run (this run: "
        "privacy=none: no differential privacy)"
    )
    weighted = compose_experiment(["algorithm=fednova", "privacy=central_fixed"])
    assert "weighs clients by its local steps" in str(policy.refusal(weighted))


def test_algorithms_rounds_and_shipped_model_code_are_each_refused_with_the_reason() -> None:
    policy = SitePolicy("site_a", algorithms=("fedavg", "fedprox"), max_rounds=5)
    assert policy.refusal(compose_experiment(["algorithm=scaffold"])) == (
        "site_a: accepts algorithm fedavg, fedprox (this run has algorithm=scaffold)"
    )
    assert policy.refusal(compose_experiment(["num_rounds=6"])) == (
        "site_a: accepts at most 5 rounds (this run has num_rounds=6)"
    )
    assert policy.refusal(compose_experiment(["algorithm=fedprox", "num_rounds=5"])) is None
    cfg = _as_the_node_reads_it([])
    cfg.model.source = "/srv/models/net.py"
    assert SitePolicy("site_a", model_source=False).refusal(cfg) == (
        "site_a: runs no model code shipped with a run (this run has model.source="
        "/srv/models/net.py)"
    )
    assert SitePolicy("site_a").refusal(cfg) is None


def test_a_run_without_fl_systems_config_cannot_be_checked_and_is_refused() -> None:
    check = site_policy.policy_check(SitePolicy("site_b", max_rounds=3))
    assert check(SimpleNamespace(override_config={})) == (
        "site_b: the run carries no fl_system experiment config, so this site cannot check it"
    )


def test_a_policy_file_is_read_with_its_site_name_and_defaults(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "algorithms: [fedavg]\nsecagg: secaggplus\nprivacy: {max_epsilon: 8}\n"
        "max_rounds: 40\nmodel_source: false\n",
    )
    policy = site_policy.load(path, "client-b")
    assert policy == SitePolicy(
        "client-b", ("fedavg",), "secaggplus", 8, 1e-5, max_rounds=40, model_source=False
    )
    assert policy.summary() == (
        "site client-b accepts algorithms fedavg; secagg=secaggplus required; DP with epsilon "
        "<= 8 at delta <= 1e-05; at most 40 rounds; no model code shipped with a run"
    )
    named = site_policy.load(_write(tmp_path, "site: site_b\n"), "client-b")
    assert named == SitePolicy("site_b") and named.summary() == "site site_b accepts every run"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("secagg: yes\n", "secagg must be secaggplus, got True"),
        ("max_round: 3\n", "unknown key 'max_round'"),
        ("max_rounds: 0\n", "max_rounds must be a positive integer, got 0"),
        ("algorithms: fedavg\n", "algorithms must be a list of algorithm names"),
        ("privacy: {max_delta: 1.0e-6}\n", "privacy needs max_epsilon"),
        ("privacy: {max_epsilon: -1}\n", "privacy.max_epsilon must be a positive number"),
        ("privacy: {max_delta: 2, max_epsilon: 1}\n", "privacy.max_delta must be a positive "),
        ("privacy: {epsilon: 1}\n", "unknown key privacy.epsilon"),
        ("model_source: maybe\n", "model_source must be true or false"),
        ("- fedavg\n", "must hold a mapping"),
        ("a: [\n", "is not YAML"),
    ],
)
def test_a_bad_policy_is_one_line_naming_the_file_and_key(
    tmp_path: Path, text: str, error: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(ValueError) as err:
        site_policy.load(path, "x")
    assert error in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)

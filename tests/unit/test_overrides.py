"""`compression.up=st` selects the codec group's option for that package (config.overrides)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from fl_system.cli import CONF_DIR
from fl_system.config.experiment import build_compression
from fl_system.config.overrides import (
    check_choices,
    check_keys,
    check_syntax,
    mounted_groups,
    rewrite,
)


def test_mounted_groups_come_from_config_yaml() -> None:
    assert mounted_groups(CONF_DIR) == {
        "compression.up": "codec",
        "compression.down": "codec",
        "aggregation.robust": "robust",
    }


def test_the_package_name_selects_an_option_and_values_inside_it_pass() -> None:
    overrides = ["compression.up=st", "compression.up.q=0.05", "num_rounds=3"]
    rewritten = rewrite(overrides, mounted_groups(CONF_DIR), CONF_DIR)
    assert rewritten == ["codec@compression.up=st", "compression.up.q=0.05", "num_rounds=3"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=rewritten)
    compression = build_compression(cfg)
    assert compression is not None
    assert compression.codec.q == 0.05 and compression.error_feedback is True


def test_the_default_codec_sends_models_as_they_are() -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config")
    assert cfg.compression.up.name == "none"
    assert build_compression(cfg) is None


def test_an_unknown_option_names_the_key_and_the_choices() -> None:
    with pytest.raises(ValueError, match=r"compression\.up=zip: no such option; choose one of"):
        rewrite(["compression.up=zip"], mounted_groups(CONF_DIR), CONF_DIR)
    with pytest.raises(ValueError, match=r"compression\.up=zip: no such option; choose one of"):
        rewrite(["compression.up=st,zip"], mounted_groups(CONF_DIR), CONF_DIR)


def test_a_mounted_group_sweeps_like_any_other() -> None:
    rewritten = rewrite(["compression.up=none,st"], mounted_groups(CONF_DIR), CONF_DIR)
    assert rewritten == ["codec@compression.up=none,st"]


def test_a_runtimes_settings_may_be_named_after_the_runtime() -> None:
    overrides = ["runtime=simulation", "simulation.address=auto", "simulation.client_cpus=2"]
    rewritten = rewrite(overrides, mounted_groups(CONF_DIR), CONF_DIR)
    assert rewritten == ["runtime=simulation", "runtime.address=auto", "runtime.client_cpus=2"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", overrides=rewritten)
    assert cfg.runtime.address == "auto" and cfg.runtime.client_cpus == 2
    assert rewrite(["local.host=0.0.0.0"], {}, CONF_DIR) == ["runtime.host=0.0.0.0"]  # default


def test_a_setting_of_another_runtime_says_which_runtime_has_it() -> None:
    with pytest.raises(ValueError) as raised:
        rewrite(["simulation.address=auto"], mounted_groups(CONF_DIR), CONF_DIR)
    assert str(raised.value) == (
        "simulation.address is a setting of runtime=simulation, and this run has "
        "runtime=local (add runtime=simulation)"
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm=nosuch"], "algorithm=nosuch: no such option; choose one of efl, fedacg,"),
        (["seed=1", "dataset=mnist5k,cifar11"], "dataset=cifar11: no such option; choose one"),
        (
            ["tracking=[mlflow,tensorbord]"],
            "tracking=tensorbord: no such option; choose one of mlflow, tensorboard, wandb",
        ),
        (["tracking=[mlflow],[wandb,tb]"], "tracking=tb: no such option; choose one of"),
    ],
)
def test_an_unknown_group_option_is_one_line_with_the_choices(overrides, message) -> None:
    with pytest.raises(ValueError) as err:
        check_choices(overrides, CONF_DIR)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_an_unreadable_override_is_one_line_saying_how_to_quote() -> None:
    with pytest.raises(ValueError) as err:
        check_syntax(["num_rounds=3", "hydra.run.dir=out/lr=0.1"])
    assert str(err.value) == (
        "hydra.run.dir=out/lr=0.1: Hydra cannot read this override (mismatched input '=' "
        "expecting <EOF>); quote a value that holds '=', spaces or brackets: "
        "\"hydra.run.dir='...'\""
    )


def test_quoted_values_lists_sweeps_and_flags_read() -> None:
    check_syntax(
        ["hydra.run.dir='out/lr=0.1'", "clients.malicious.ids=[1]", "seed=1,2", "-m", "+x=1"]
    )


def test_known_options_and_sweeps_pass() -> None:
    check_choices(["algorithm=fedavg,fedprox", "dataset=digits", "num_rounds=3"], CONF_DIR)
    check_choices(["tracking=[mlflow,wandb]", "tracking=[]", "tracking=tensorboard"], CONF_DIR)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["partition.alpha=-1"],
            "partition.alpha: partition=iid has no setting 'alpha'; partition=dirichlet has it",
        ),
        (
            ["algorithm.mu=0.1"],
            "algorithm.mu: algorithm=fedavg has no setting 'mu'; "
            "algorithm=fedasync, algorithm=fedprox and algorithm=moon have it",
        ),
        (["num_roundz=3"], "num_roundz: no such setting; did you mean num_rounds?"),
        (
            ["tracking.uri=x"],
            "tracking.uri: tracking=[] has no setting 'uri'; tracking=mlflow has it",
        ),
    ],
)
def test_a_key_the_config_lacks_says_where_it_lives(overrides, message) -> None:
    with pytest.raises(ValueError) as err:
        check_keys(overrides, CONF_DIR)
    assert str(err.value).startswith(message)


def test_keys_of_the_chosen_options_pass() -> None:
    check_keys(
        [
            "partition=dirichlet",
            "partition.alpha=0.3",
            "algorithm=fedprox",
            "algorithm.mu=0.1",
            "hydra.run.dir=/nowhere",
        ],
        CONF_DIR,
    )

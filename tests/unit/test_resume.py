"""Resume's comparison of a checkpointed config with the current one, on exact configs."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from fl_system.config.compose import compose_experiment, default_config
from fl_system.config.resume import check_same_experiment, defaults_line
from fl_system.records.checkpoint import CheckpointError

NOW = {
    "seed": 1,
    "num_rounds": 9,
    "train": {"lr": 0.05, "momentum": 0.0},
    "stragglers": {"incomplete": 0.0, "inactive": 0.3},
    "clients": {"corrupt": {"ids": [], "shift": 3}},
}
DEFAULTS = {**NOW, "stragglers": {"incomplete": 0.0, "inactive": 0.0}}
ONLY = (
    " (only checkpoint, eval_every, keep_client_state, num_rounds, resume, round_timeout, "
    "run_dir, runtime, server, target_accuracy, tracking may change on resume)"
)
# FedDisco's add-on as an older config wrote it: a copy under the strategy, and another
# normalize_d default
OLD_DISCO = {
    "algorithm": {
        "name": "fedavg",
        "disco": {"_target_": "old.Disco", "enabled": False, "normalize_d": "sum"},
        "strategy": {"_target_": "FedAvg", "disco": {"enabled": False, "a": 0.5}},
    }
}
NEW_DISCO = {
    "algorithm": {
        "name": "fedavg",
        "disco": {"enabled": False, "server": {"normalize_d": "auto"}, "client": {}},
        "strategy": {"_target_": "FedAvg"},
    }
}
DISCO_ON = {"algorithm": {**NEW_DISCO["algorithm"], "disco": {"enabled": True, "a": 0.5}}}


def test_the_same_experiment_with_other_resumable_keys_fills_nothing() -> None:
    saved = {**NOW, "num_rounds": 5, "server": {"device": "cuda"}}
    assert check_same_experiment(saved, NOW, DEFAULTS) == []


def test_settings_the_checkpoint_predates_take_their_defaults_named_by_their_node() -> None:
    saved = {"seed": 1, "num_rounds": 5, "train": {"lr": 0.05}}
    filled = check_same_experiment(saved, DEFAULTS, DEFAULTS)
    assert filled == ["train.momentum", "stragglers", "clients"]
    assert defaults_line(filled) == (
        "the checkpoint predates train.momentum, stragglers, clients: resuming with their defaults"
    )


def test_an_add_on_off_then_and_now_is_not_compared_whatever_its_layout() -> None:
    assert check_same_experiment(OLD_DISCO, NEW_DISCO, NEW_DISCO) == []


@pytest.mark.parametrize(
    ("saved", "now", "defaults", "message"),
    [
        pytest.param(
            {**NOW, "train": {"lr": 0.1, "momentum": 0.0}},
            NOW,
            DEFAULTS,
            "the config differs from the checkpointed run in train.lr" + ONLY,
            id="changed",
        ),
        pytest.param(
            {**NOW, "train": {"lr": 0.05, "momentum": 0.0, "nesterov": False}},
            NOW,
            DEFAULTS,
            "the config differs from the checkpointed run in train.nesterov "
            "(no longer a setting)" + ONLY,
            id="gone",
        ),
        pytest.param(
            {"seed": 1, "train": {"lr": 0.05, "momentum": 0.0}, "clients": NOW["clients"]},
            NOW,
            DEFAULTS,
            "the checkpointed run predates stragglers.inactive, which is 0.3 now "
            "(its default is 0.0)",
            id="predated, not at its default",
        ),
        pytest.param(
            {"seed": 1},
            {"seed": 1, "extra": {"k": 2}},
            {"seed": 1},
            "the checkpointed run predates extra.k, which is 2 now (has no default)",
            id="predated, no default",
        ),
        pytest.param(  # the strategy's old copy, off then and gone now, is still left out
            OLD_DISCO,
            DISCO_ON,
            NEW_DISCO,
            "the config differs from the checkpointed run in algorithm.disco._target_ "
            "(no longer a setting), algorithm.disco.enabled, algorithm.disco.normalize_d "
            "(no longer a setting)" + ONLY + "; the checkpointed run predates "
            "algorithm.disco.a, which is 0.5 now (has no default)",
            id="add-on switched on since",
        ),
    ],
)
def test_another_experiment_is_refused_in_one_line_naming_each_setting(
    saved: dict, now: dict, defaults: dict, message: str
) -> None:
    with pytest.raises(CheckpointError) as err:
        check_same_experiment(saved, now, defaults)
    assert str(err.value) == "cannot resume: " + message


def test_defaults_are_conf_with_the_runs_own_options_and_no_other_override() -> None:
    cfg = compose_experiment(
        ["algorithm=taco", "train.local_steps=5", "algorithm.kappa=0.9", "compression.up=topk"]
    )
    current = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(current, dict)
    defaults = default_config(current)
    assert defaults["algorithm"]["name"] == "taco"
    assert defaults["algorithm"]["kappa"] == 0.6
    assert defaults["train"]["local_steps"] is None
    assert defaults["compression"]["up"] == current["compression"]["up"]
    assert current["compression"]["up"]["name"] == "topk"
    assert defaults["compression"]["down"]["name"] == "none"
    assert defaults["run_id"] is None


def test_a_checkpoint_naming_a_moved_module_by_its_old_path_is_the_same_experiment() -> None:
    """Written before fl_system was split into rooms: fl_system.models is fl_system.learning's
    now; a model of another class, or from another module, still differs."""
    saved = {**NOW, "model": {"_target_": "fl_system.models.CNN", "width": 32}}
    now = {**NOW, "model": {"_target_": "fl_system.learning.models.CNN", "width": 32}}
    assert check_same_experiment(saved, now, DEFAULTS) == []
    for other in ("fl_system.learning.models.MLP", "tinynets.models.CNN"):
        with pytest.raises(CheckpointError, match=r"differs from the checkpointed run in model\._"):
            check_same_experiment(saved, {**NOW, "model": {"_target_": other}}, DEFAULTS)

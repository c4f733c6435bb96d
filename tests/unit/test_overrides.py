"""`compression.up=st` selects the codec group's option for that package (fl_system.overrides)."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir

from fl_system.cli import CONF_DIR
from fl_system.experiment import build_compression
from fl_system.overrides import mounted_groups, rewrite


def test_mounted_groups_come_from_config_yaml() -> None:
    assert mounted_groups(CONF_DIR) == {"compression.up": "codec", "compression.down": "codec"}


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

"""The checks before a run on a Ray cluster (fl_system.runtime.launch.ray_cluster), without Ray."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from fl_system.config.compose import CONF_DIR
from fl_system.runtime.launch import LaunchError, ray_cluster
from fl_system.runtime.launch.ports import free_port
from fl_system.runtime.launch.ray_cluster import ClusterError
from fl_system.settings.config_nodes import config_to_json


def test_an_address_nobody_answers_is_refused_with_how_to_start_a_head() -> None:
    port = free_port()
    with pytest.raises(ClusterError) as raised:
        ray_cluster.find(f"127.0.0.1:{port}")
    message = str(raised.value)
    assert f"runtime.address=127.0.0.1:{port}: no Ray head answers there" in message
    assert f"`ray start --head --port={port}`" in message
    assert isinstance(raised.value, LaunchError)  # fl-run: one line, exit 2


@pytest.mark.parametrize("address", ["6379", "head", ":6379", "head:port"])
def test_an_address_that_is_not_host_port_is_refused(address: str) -> None:
    with pytest.raises(ClusterError, match=r"runtime\.address must be auto or HOST:PORT"):
        ray_cluster.find(address)


def test_differences_name_each_entry_with_both_values() -> None:
    here = {"Python": "3.11.7", "torch": "2.14.1", "fl_system code": "abc"}
    there = {"Python": "3.11.7", "torch": "2.13.0", "fl_system code": "def"}
    assert ray_cluster.differences(here, there) == [
        "torch 2.13.0 (here: 2.14.1)",
        "fl_system code def (here: abc)",
    ]
    assert ray_cluster.differences(here, dict(here)) == []
    assert ray_cluster.differences(here, {}) == [
        "Python missing (here: 3.11.7)",
        "torch missing (here: 2.14.1)",
        "fl_system code missing (here: abc)",
    ]


def test_the_fingerprint_covers_python_the_packages_and_our_code() -> None:
    found = ray_cluster.fingerprint()
    assert set(found) == {"Python", *ray_cluster.PACKAGES, "fl_system code"}
    assert found["fl-system"] != "not installed" and len(found["fl_system code"]) == 12
    assert ray_cluster.fingerprint() == found


def test_a_node_that_differs_is_named_before_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    here = ray_cluster.fingerprint()
    other = "1.0.0" if here["torch"] != "1.0.0" else "1.0.1"  # a torch unlike this one
    monkeypatch.setattr(ray_cluster, "connect", lambda address: None)
    monkeypatch.setattr(
        ray_cluster,
        "on_every_node",
        lambda task: {"10.0.0.1": dict(here), "10.0.0.2": {**here, "torch": other}},
    )
    with pytest.raises(ClusterError) as raised:
        ray_cluster.join("10.0.0.1:6379", client_gpus=0)
    assert str(raised.value) == (
        "the Ray cluster's nodes differ from this machine (install the same environment and "
        f"checkout on every node): Ray node 10.0.0.2: torch {other} (here: {here['torch']})"
    )


def test_a_node_without_the_dataset_says_which_file_it_lacks(tmp_path: Path) -> None:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", ["dataset=fmnist", f"dataset.source.root={tmp_path}"])
    problem = ray_cluster._data_problem(config_to_json(cfg))
    assert problem is not None
    assert problem.startswith(
        f"FashionMNIST not found: none of {tmp_path}/FashionMNIST/raw, {tmp_path} holds "
    )

"""A node's training data: its partition (cached on disk) or its own data directory."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir

from client_app.local_data import NodeIdentity, local_training_data
from fl_system.cli import CONF_DIR
from fl_system.data import partition_cache
from fl_system.data.configured import load_dataset, partition_indices
from fl_system.data.node_dir import write_node_dir


def _cfg():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose("config", overrides=["dataset=digits", "num_clients=3"])


def test_partition_is_cached_and_identical(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = _cfg()
    node = NodeIdentity(partition_id=1, num_partitions=3, cache_dir=str(tmp_path))
    x1, y1 = local_training_data(cfg, node)
    assert len(x1) == len(y1) > 0
    cached = list(tmp_path.glob("partition-*.npz"))
    assert len(cached) == 1
    monkeypatch.setattr(partition_cache, "_in_memory", OrderedDict())  # a new process
    x2, y2 = local_training_data(cfg, node)  # served from the cache file
    idx = partition_indices(cfg, 3)[1]
    data = load_dataset(cfg)
    np.testing.assert_array_equal(x2, data.x_train[idx])
    np.testing.assert_array_equal(y2, data.y_train[idx])
    np.testing.assert_array_equal(x1, x2)


def test_a_process_keeps_the_partitions_it_read(tmp_path: Path) -> None:
    """A simulation worker plays many clients: it reads each partition's file once."""
    cfg = _cfg()
    node = NodeIdentity(partition_id=2, num_partitions=3, cache_dir=str(tmp_path))
    x1, y1 = local_training_data(cfg, node)
    for path in tmp_path.glob("partition-*.npz"):
        path.unlink()
    x2, y2 = local_training_data(cfg, node)
    assert x2 is x1 and y2 is y1
    assert not list(tmp_path.glob("partition-*.npz"))  # neither read nor rebuilt


def test_a_process_keeps_partitions_up_to_its_memory_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = _cfg()
    nodes = [
        NodeIdentity(partition_id=p, num_partitions=3, cache_dir=str(tmp_path)) for p in (0, 1)
    ]
    x0, y0 = local_training_data(cfg, nodes[0])
    monkeypatch.setattr(partition_cache, "MEMORY_BYTES", x0.nbytes + y0.nbytes + 1)
    x1, _ = local_training_data(cfg, nodes[1])  # partition 0 makes room for it
    for path in tmp_path.glob("partition-*.npz"):
        path.unlink()
    assert local_training_data(cfg, nodes[1])[0] is x1
    assert not list(tmp_path.glob("partition-*.npz"))
    again, _ = local_training_data(cfg, nodes[0])  # evicted: rebuilt into the cache
    np.testing.assert_array_equal(again, x0)
    assert len(list(tmp_path.glob("partition-*.npz"))) == 1


def test_other_seed_other_cache_entry(tmp_path: Path) -> None:
    cfg = _cfg()
    node = NodeIdentity(partition_id=0, num_partitions=3, cache_dir=str(tmp_path))
    local_training_data(cfg, node)
    cfg.seed = 7
    local_training_data(cfg, node)
    assert len(list(tmp_path.glob("partition-*.npz"))) == 2


def test_node_started_for_another_federation_size(tmp_path: Path) -> None:
    node = NodeIdentity(partition_id=0, num_partitions=5, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match="num-partitions=5 but the run has num_clients=3"):
        local_training_data(_cfg(), node)


def test_partition_id_out_of_range(tmp_path: Path) -> None:
    node = NodeIdentity(partition_id=3, num_partitions=3, cache_dir=str(tmp_path))
    with pytest.raises(ValueError, match=r"partition-id 3 is outside 0\.\.2"):
        local_training_data(_cfg(), node)


def test_own_data_directory_wins(tmp_path: Path) -> None:
    x = np.random.default_rng(0).normal(size=(7, 1, 8, 8)).astype(np.float32)
    y = np.arange(7, dtype=np.int64) % 10
    write_node_dir(tmp_path / "silo", x, y)
    node = NodeIdentity(partition_id=0, num_partitions=3, data_dir=str(tmp_path / "silo"))
    got_x, got_y = local_training_data(_cfg(), node)
    np.testing.assert_array_equal(got_x, x)
    np.testing.assert_array_equal(got_y, y)


def test_a_label_shifted_partition_trains_on_shifted_labels(tmp_path: Path) -> None:
    cfg = _cfg()
    cfg.clients.corrupt.ids = [1]
    cfg.clients.corrupt.shift = 3
    nodes = [NodeIdentity(p, num_partitions=3, cache_dir=str(tmp_path)) for p in (0, 1)]
    clean = [partition_cache.cached_partition(cfg, p, tmp_path) for p in (0, 1)]
    _, y0 = local_training_data(cfg, nodes[0])
    x1, y1 = local_training_data(cfg, nodes[1])
    np.testing.assert_array_equal(y0, clean[0][1])  # not named: untouched
    np.testing.assert_array_equal(y1, (clean[1][1] + 3) % 10)
    np.testing.assert_array_equal(x1, clean[1][0])
    # the clean partition kept in memory is not changed by the corruption
    np.testing.assert_array_equal(
        partition_cache.cached_partition(cfg, 1, tmp_path)[1], clean[1][1]
    )
    assert not np.array_equal(y1, clean[1][1])


def test_a_noise_partition_trains_on_uniform_noise(tmp_path: Path) -> None:
    cfg = _cfg()
    cfg.clients.corrupt.ids = [0]
    cfg.clients.corrupt.kind = "noise"
    node = NodeIdentity(0, num_partitions=3, cache_dir=str(tmp_path))
    clean_x, clean_y = partition_cache.cached_partition(cfg, 0, tmp_path)
    x, y = local_training_data(cfg, node)
    assert x.shape == clean_x.shape and x.dtype == clean_x.dtype
    assert x.min() >= -1 and x.max() <= 1 and x.std() == pytest.approx(1 / np.sqrt(3), rel=0.05)
    np.testing.assert_array_equal(y, clean_y)
    np.testing.assert_array_equal(local_training_data(cfg, node)[0], x)  # the same every round

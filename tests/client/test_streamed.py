"""A node whose records are too large to hold normalised trains on a view of its mapped cache,
read a batch at a time: the same batches, the same model, the same statistics as in memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from PIL import Image

from client_app import trainer
from client_app.algorithms.fedavg import FedAvgRule
from client_app.local_data import NodeIdentity, local_test_data, local_training_data
from client_app.per_sample import gradient_moments
from client_app.trainer import TrainSettings, train_locally
from fl_system.config.compose import CONF_DIR
from fl_system.data.node_data import Task, normalised, statistics
from fl_system.data.node_data.streamed import IN_MEMORY_ENV, Streamed
from tests.client.tiny import linear_data, linear_model

CPU = torch.device("cpu")
TABLE = Task(kind="npz", classes=("a", "b"), shape=(4,), mean=(0.5,), std=(2.0,))


def _mapped(tmp_path, x: np.ndarray) -> np.ndarray:
    np.save(tmp_path / "x.npy", x)
    return np.load(tmp_path / "x.npy", mmap_mode="r")


def test_a_view_reads_and_normalises_exactly_the_rows_asked_for(tmp_path):
    x, _ = linear_data(40)
    whole = normalised(x, TABLE)
    view = Streamed(_mapped(tmp_path, x), lambda raw: normalised(raw, TABLE))
    assert len(view) == 40 and view.shape == (40, 4) and view.nbytes == 40 * 4 * 4
    np.testing.assert_array_equal(view[3:9], whole[3:9])
    picked = np.array([31, 2, 17, 2])
    np.testing.assert_array_equal(view[picked], whole[picked])
    np.testing.assert_array_equal(view[torch.tensor([5, 0])], whole[[5, 0]])
    rows = np.array([7, 30, 1, 22, 9])
    part = view.subset(rows)
    np.testing.assert_array_equal(part[1:4], whole[rows[1:4]])
    np.testing.assert_array_equal(part.subset(np.array([4, 0]))[:], whole[rows[[4, 0]]])


@pytest.mark.parametrize("ahead", [3, 16])  # 7 steps: reads of 3, 3 and 1 batches; or one
def test_training_and_per_sample_gradients_on_a_view_equal_those_in_memory(
    tmp_path, monkeypatch, ahead
):
    monkeypatch.setattr(trainer, "READ_AHEAD", ahead)
    x, y = linear_data(40)
    view = Streamed(_mapped(tmp_path, x), np.asarray)
    settings = TrainSettings(local_steps=7, batch_size=8, lr=0.1)
    trained = []
    for records in (x, view):
        model = linear_model()
        result = train_locally(model, records, y, FedAvgRule(), settings, seed=3, device=CPU)
        assert result.num_examples == 40 and result.steps == 7
        trained.append(model.state_dict())
    for key in trained[0]:
        assert torch.equal(trained[0][key], trained[1][key]), key
    ours = gradient_moments(linear_model(), view, y, samples=16, seed=4)
    theirs = gradient_moments(linear_model(), x, y, samples=16, seed=4)
    for a, b in zip(ours, theirs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_moments_taken_a_chunk_at_a_time_equal_numpys(monkeypatch):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (50, 3, 4, 4), dtype=np.uint8)
    task = Task(kind="images", classes=("a", "b"), image_size=(4, 4), channels=3)
    monkeypatch.setattr(statistics, "CHUNK", 7)
    moments = statistics.node_moments(x, task)
    per = np.moveaxis(x.astype(np.float64) / 255.0, 1, 0).reshape(3, -1)
    np.testing.assert_array_equal(moments["count"], [800.0] * 3)
    np.testing.assert_allclose(moments["sum"], per.sum(axis=1), rtol=1e-14)
    np.testing.assert_allclose(
        moments["m2"], ((per - per.mean(axis=1, keepdims=True)) ** 2).sum(axis=1), rtol=1e-12
    )


def test_a_node_past_its_memory_limit_streams_its_image_folder(tmp_path, monkeypatch):
    for label, value in (("cat", 40), ("dog", 200)):
        for i in range(6):
            (tmp_path / "site" / label).mkdir(parents=True, exist_ok=True)
            Image.new("L", (4, 4), value + i).save(tmp_path / "site" / label / f"{i}.png")
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(
            "config",
            overrides=[
                "dataset=images",
                "dataset.classes=[cat,dog]",
                "dataset.image_size=[4,4]",
                "dataset.mean=[0.5]",
                "dataset.std=[0.25]",
                "evaluation=federated",
                "num_clients=1",
                f"runtime.node_data=[{tmp_path / 'site'}]",
            ],
        )
    node = NodeIdentity(partition_id=0, num_partitions=1, cache_dir=str(tmp_path / "cache"))
    held = local_training_data(cfg, node), local_test_data(cfg, node)
    monkeypatch.setenv(IN_MEMORY_ENV, "0")
    streamed = local_training_data(cfg, node), local_test_data(cfg, node)
    for (x, y), (view, labels) in zip(held, streamed, strict=True):
        assert isinstance(x, np.ndarray) and isinstance(view, Streamed)
        assert isinstance(view.base, np.memmap)  # the node's cache, mapped
        np.testing.assert_array_equal(labels, y)
        np.testing.assert_array_equal(view[:], x)
    assert len(held[0][1]) + len(held[1][1]) == 12


@pytest.mark.parametrize("limit", ["0", "1024"])
def test_corrupting_records_needs_them_in_memory(tmp_path, monkeypatch, limit):
    np.savez(tmp_path / "train.npz", x=np.ones((8, 4), np.float32), y=np.arange(8) % 2)
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose(
            "config",
            overrides=[
                "dataset=npz",
                "dataset.classes=[a,b]",
                "dataset.input_shape=[4]",
                "num_clients=1",
                "clients.corrupt.ids=[0]",
                "clients.corrupt.kind=noise",
                f"runtime.node_data=[{tmp_path}]",
            ],
        )
    monkeypatch.setenv(IN_MEMORY_ENV, limit)
    node = NodeIdentity(partition_id=0, num_partitions=1, cache_dir=str(tmp_path / "cache"))
    if limit == "0":
        with pytest.raises(ValueError, match="rewrites records in memory; node 0 streams its 8"):
            local_training_data(cfg, node)
    else:
        x, _ = local_training_data(cfg, node)
        assert not np.array_equal(x, np.ones((8, 4)))  # noise added in memory

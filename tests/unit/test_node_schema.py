"""The task read from the nodes' files when the experiment leaves it unset (runtime.node_data):
real CSV, Parquet, saved-dataset, image-folder and npz files."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from PIL import Image

import fl_system.settings.config_nodes  # noqa: F401  (the dataset group's resolvers)
from fl_system.config.compose import CONF_DIR
from fl_system.data.node_data import Task, read_node_data
from fl_system.data.node_data.schema import MAX_CATEGORIES, complete_task, unset
from fl_system.settings.value_checks import ConfigError


def _cfg(*overrides: str):
    """The experiment as fl-run holds it when it checks the parts: composed, unresolved."""
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return compose(config_name="config", overrides=list(overrides))


def _nodes(*paths) -> str:
    return f"runtime.node_data=[{','.join(str(p) for p in paths)}]"


def test_a_tables_classes_and_features_are_read_from_csv_parquet_and_a_saved_dataset(tmp_path):
    import datasets

    pa_csv.write_csv(
        pa.table({"age": [1, 2], "sex": ["f", "m"], "label": ["yes", "no"]}), tmp_path / "a.csv"
    )
    pq.write_table(
        pa.table({"age": [1.5, 3.0], "sex": ["x", "f"], "label": ["no", "no"], "id": [7, 8]}),
        tmp_path / "b.parquet",
    )
    datasets.Dataset(
        pa.table({"age": [4, 5], "sex": ["m", "m"], "label": ["maybe", "yes"]})
    ).save_to_disk(str(tmp_path / "c"))
    cfg = _cfg(
        "dataset=table",
        "num_clients=3",
        "runtime=local",
        _nodes(tmp_path / "a.csv", tmp_path / "b.parquet", tmp_path / "c"),
    )
    assert unset(cfg) == ["classes", "features"]
    said: list[str] = []
    complete_task(cfg, said.append)
    assert list(cfg.dataset.classes) == ["maybe", "no", "yes"]
    assert OmegaConf.to_container(cfg.dataset.features) == {"age": "float", "sex": ["f", "m", "x"]}
    assert cfg.dataset.num_classes == 3 and list(cfg.dataset.input_shape) == [4]
    assert said[0] == 'columns left out of dataset.features: "id" (not on every node)'
    assert "dataset.classes=[maybe,no,yes]" in said[1]
    # what was read is a task every node's files fit
    task = Task.from_config(cfg)
    read = read_node_data(tmp_path / "b.parquet", task)
    np.testing.assert_array_equal(read.train.x, [[1.5, 0, 0, 1], [3.0, 1, 0, 0]])
    assert read.train.y.tolist() == [1, 1]


def test_numeric_labels_are_ordered_by_value_and_a_class_labels_names_keep_their_order(tmp_path):
    import datasets

    pa_csv.write_csv(pa.table({"v": [0.5, 1.0], "label": [10, 2]}), tmp_path / "a.csv")
    pa_csv.write_csv(pa.table({"v": [0.5, 1.0], "label": [1, 2]}), tmp_path / "b.csv")
    cfg = _cfg("dataset=table", "num_clients=2", _nodes(tmp_path / "a.csv", tmp_path / "b.csv"))
    complete_task(cfg, lambda _: None)
    assert list(cfg.dataset.classes) == ["1", "2", "10"]

    features = datasets.Features(
        {"v": datasets.Value("float64"), "label": datasets.ClassLabel(names=["z", "a"])}
    )
    for name, labels in (("h1", [0, 0]), ("h2", [1, 0])):
        datasets.Dataset.from_dict(
            {"v": [1.0, 2.0], "label": labels}, features=features
        ).save_to_disk(str(tmp_path / name))
    cfg = _cfg("dataset=table", "num_clients=2", _nodes(tmp_path / "h1", tmp_path / "h2"))
    complete_task(cfg, lambda _: None)
    assert list(cfg.dataset.classes) == ["z", "a"]


def test_a_column_text_on_one_node_and_numeric_on_another_is_named(tmp_path):
    pa_csv.write_csv(pa.table({"age": [1.5, 2.5], "label": ["a", "b"]}), tmp_path / "a.csv")
    pa_csv.write_csv(pa.table({"age": ["old", "young"], "label": ["a", "b"]}), tmp_path / "b.csv")
    cfg = _cfg("dataset=table", "num_clients=2", _nodes(tmp_path / "a.csv", tmp_path / "b.csv"))
    with pytest.raises(ConfigError) as err:
        complete_task(cfg, lambda _: None)
    assert str(err.value) == (
        f'{tmp_path / "b.csv"}: column "age" is text, on {tmp_path / "a.csv"} it is float: fix '
        "the files, or name the columns to use in dataset.features"
    )


def test_free_text_is_left_out_and_a_single_label_is_refused(tmp_path):
    many = [f"note {i}" for i in range(MAX_CATEGORIES + 1)]
    pa_csv.write_csv(
        pa.table({"note": many, "v": [1.5] * len(many), "label": ["a", "b"] * 16 + ["a"]}),
        tmp_path / "a.csv",
    )
    cfg = _cfg("dataset=table", "num_clients=1", _nodes(tmp_path / "a.csv"))
    said: list[str] = []
    complete_task(cfg, said.append)
    assert OmegaConf.to_container(cfg.dataset.features) == {"v": "float"}
    assert said[0] == (
        f'columns left out of dataset.features: "note" (text with over {MAX_CATEGORIES} '
        "distinct values)"
    )
    pa_csv.write_csv(pa.table({"v": [1.0], "label": ["a"]}), tmp_path / "one.csv")
    cfg = _cfg("dataset=table", "num_clients=1", _nodes(tmp_path / "one.csv"))
    with pytest.raises(
        ConfigError, match=r"holds 1 label value\(s\) \(a\): a classifier needs two"
    ):
        complete_task(cfg, lambda _: None)


def test_image_folders_give_the_union_of_their_class_folders(tmp_path):
    for site, classes in (("s1", ["cat", "dog"]), ("s2", ["dog", "eel"])):
        for name in classes:
            (tmp_path / site / "train" / name).mkdir(parents=True)
            Image.new("L", (4, 4), 9).save(tmp_path / site / "train" / name / "x.png")
    (tmp_path / "s2" / "test" / "fox").mkdir(parents=True)
    Image.new("L", (4, 4), 9).save(tmp_path / "s2" / "test" / "fox" / "y.png")
    cfg = _cfg("dataset=images", "num_clients=2", _nodes(tmp_path / "s1", tmp_path / "s2"))
    complete_task(cfg, lambda _: None)
    assert list(cfg.dataset.classes) == ["cat", "dog", "eel", "fox"]
    assert cfg.dataset.num_classes == 4


def test_npz_gives_its_shape_and_label_count_and_must_agree(tmp_path):
    np.savez(tmp_path / "a.npz", x=np.zeros((3, 5), np.float32), y=np.array([0, 2, 1]))
    np.savez(tmp_path / "b.npz", x=np.zeros((2, 5), np.float32), y=np.array([3, 0]))
    cfg = _cfg("dataset=npz", "num_clients=2", _nodes(tmp_path / "a.npz", tmp_path / "b.npz"))
    complete_task(cfg, lambda _: None)
    assert list(cfg.dataset.classes) == ["0", "1", "2", "3"]
    assert list(cfg.dataset.input_shape) == [5]
    np.savez(tmp_path / "b.npz", x=np.zeros((2, 6), np.float32), y=np.array([1, 0]))
    cfg = _cfg("dataset=npz", "num_clients=2", _nodes(tmp_path / "a.npz", tmp_path / "b.npz"))
    with pytest.raises(ConfigError, match=r"npz records differ in shape .*\[5\].*\[6\]"):
        complete_task(cfg, lambda _: None)


def test_what_the_experiment_names_is_kept_and_remote_nodes_need_it_named(tmp_path):
    pa_csv.write_csv(pa.table({"v": [1.0, 2.0], "label": ["a", "b"]}), tmp_path / "a.csv")
    cfg = _cfg(
        "dataset=table",
        "num_clients=1",
        "dataset.classes=[b,a]",
        "dataset.features={v:int}",
        _nodes(tmp_path / "a.csv"),
    )
    assert unset(cfg) == []
    complete_task(cfg, lambda line: pytest.fail(f"nothing to read, yet it said {line}"))
    assert list(cfg.dataset.classes) == ["b", "a"]
    cfg = _cfg("dataset=table", "num_clients=1")  # nodes elsewhere: nothing to read here
    complete_task(cfg, lambda _: None)
    with pytest.raises(ConfigError, match=r"runtime\.node_data lets fl-run read it"):
        Task.from_config(cfg)

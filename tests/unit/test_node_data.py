"""Node-held data: real files in each format (Pillow images, pyarrow CSV/Parquet, a
`save_to_disk` dataset, npz), read for a task; reports; every bad input named."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from PIL import Image

from fl_system.data.files import DataError
from fl_system.data.node_data import (
    Task,
    detect_kind,
    mismatches,
    normalised,
    read_node_data,
)
from fl_system.data.node_data.task import Feature

IMAGES = Task(kind="images", classes=("cat", "dog"), image_size=(4, 6), channels=1)
TABLE = Task(
    kind="table",
    classes=("no", "yes"),
    label_column="label",
    features=(Feature("age", "float"), Feature("sex", "category", ("f", "m"))),
)


def _image(path: Path, value: int, size=(6, 4), mode="L", fmt="PNG") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fill = value if mode == "L" else (value, value, value)
    Image.new(mode, size, fill).save(path, fmt)


def _folder(root: Path) -> Path:
    _image(root / "cat" / "a.png", 10)
    _image(root / "cat" / "b.jpg", 200, size=(12, 8), mode="RGB", fmt="JPEG")
    _image(root / "dog" / "c.png", 255)
    return root


def _truncate(file: Path) -> None:
    """A PNG cut off in its pixel data (a copy that stopped half-way)."""
    noise = np.random.default_rng(0).integers(0, 255, (32, 32), dtype=np.uint8)
    Image.fromarray(noise).save(file, "PNG")
    file.write_bytes(file.read_bytes()[:-200])


def _rows() -> pa.Table:
    return pa.table(
        {"age": [30.0, 41.5, 58.0], "sex": ["f", "m", "f"], "label": ["yes", "no", "yes"]}
    )


def test_an_image_folder_is_decoded_converted_and_resized(tmp_path):
    data = read_node_data(_folder(tmp_path / "site"), IMAGES)
    assert data.train.x.shape == (3, 1, 4, 6) and data.train.x.dtype == np.uint8
    assert data.train.y.tolist() == [0, 0, 1]
    assert data.train.x[0].max() == 10 and data.train.x[2].min() == 255
    assert abs(int(data.train.x[1].mean()) - 200) <= 2  # JPEG, RGB -> L, 12x8 -> 6x4
    assert data.test is None
    report = data.report
    assert (report.kind, report.train_examples, report.classes) == ("images", 3, ("cat", "dog"))
    assert report.image_modes == ("L", "RGB")
    assert mismatches(report, IMAGES) == []


def test_train_and_test_folders_are_the_two_parts(tmp_path):
    _folder(tmp_path / "site" / "train")
    _image(tmp_path / "site" / "test" / "dog" / "t.png", 7)
    data = read_node_data(tmp_path / "site", IMAGES)
    assert len(data.train.y) == 3 and data.test is not None and data.test.y.tolist() == [1]


def test_a_class_folder_outside_the_vocabulary_is_a_mismatch(tmp_path):
    root = _folder(tmp_path / "site")
    _image(root / "pneumonia " / "x.png", 1)
    report = read_node_data(root, IMAGES).report
    assert mismatches(report, IMAGES) == ['class folder "pneumonia " is not in dataset.classes']


@pytest.mark.parametrize(
    ("breakage", "expected"),
    [
        (_truncate, "cannot decode the image \\(image file is truncated"),
        (lambda f: f.write_text("not an image"), "not an image Pillow can read"),
    ],
)
def test_a_broken_image_stops_the_read_or_is_skipped_and_counted(tmp_path, breakage, expected):
    root = _folder(tmp_path / "site")
    breakage(root / "dog" / "c.png")
    with pytest.raises(DataError, match=rf"dog/c\.png: {expected}"):
        read_node_data(root, IMAGES)
    skipping = Task(**{**IMAGES.__dict__, "on_bad_record": "skip"})
    data = read_node_data(root, skipping)
    assert data.report.skipped == 1 and data.train.y.tolist() == [0, 0]


def test_an_empty_class_folder_is_named(tmp_path):
    root = _folder(tmp_path / "site")
    (root / "dog" / "c.png").unlink()
    with pytest.raises(DataError, match=r"site/dog: empty class folder"):
        read_node_data(root, IMAGES)


def test_a_missing_path_a_symlink_loop_and_an_unreadable_folder_are_named(tmp_path):
    with pytest.raises(DataError, match=r"nowhere: no such file or folder"):
        read_node_data(tmp_path / "nowhere", IMAGES)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(DataError, match=r"loop: symbolic link loop"):
        read_node_data(loop, IMAGES)
    if os.geteuid() != 0:  # root reads anything
        locked = _folder(tmp_path / "locked")
        locked.chmod(0)
        try:
            with pytest.raises(DataError, match=r"locked: not readable"):
                read_node_data(locked, IMAGES)
        finally:
            locked.chmod(0o755)


def test_csv_parquet_and_a_saved_dataset_read_to_the_same_rows(tmp_path):
    import datasets

    pa_csv.write_csv(_rows(), tmp_path / "a.csv")
    pq.write_table(_rows(), tmp_path / "b.parquet")
    datasets.Dataset(_rows()).save_to_disk(str(tmp_path / "c"))
    read = [read_node_data(tmp_path / p, TABLE) for p in ("a.csv", "b.parquet", "c")]
    assert [r.report.kind for r in read] == ["table", "table", "hf"]
    expected = np.array([[30.0, 1, 0], [41.5, 0, 1], [58.0, 1, 0]], np.float32)
    for r in read:
        np.testing.assert_array_equal(r.train.x, expected)
        assert r.train.y.tolist() == [1, 0, 1]
        assert r.report.columns == {"age": "float", "sex": "text", "label": "text"}
        assert mismatches(r.report, TABLE) == []


def test_a_class_label_column_of_a_saved_dataset_is_read_by_its_names(tmp_path):
    import datasets

    features = datasets.Features(
        {
            "age": datasets.Value("float64"),
            "sex": datasets.Value("string"),
            "label": datasets.ClassLabel(names=["no", "yes"]),
        }
    )
    rows = {"age": [1.0, 2.0], "sex": ["m", "f"], "label": [1, 0]}
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict(rows, features=features),
            "test": datasets.Dataset.from_dict(rows, features=features),
        }
    ).save_to_disk(str(tmp_path / "hf"))
    data = read_node_data(tmp_path / "hf", TABLE)
    assert data.train.y.tolist() == [1, 0] and data.test is not None


def test_a_saved_image_dataset_decodes_its_image_column(tmp_path):
    import datasets

    _folder(tmp_path / "files")
    files = sorted((tmp_path / "files").rglob("*.*"))
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=["cat", "dog"])}
    )
    ds = datasets.Dataset.from_dict(
        {"image": [str(f) for f in files], "label": [0, 0, 1]}, features=features
    )
    ds = ds.cast_column("image", datasets.Image(decode=True))
    ds.save_to_disk(str(tmp_path / "hf"))
    data = read_node_data(tmp_path / "hf", Task(**{**IMAGES.__dict__, "kind": "hf"}))
    assert data.train.x.shape == (3, 1, 4, 6) and data.train.y.tolist() == [0, 0, 1]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ({"age": ["30", "n/a", "2"]}, r'record 2: column "age" holds "n/a", the task says float'),
        ({"age": [1.0, float("nan"), 2.0]}, r'record 2: column "age" holds nan \(not finite\)'),
        ({"age": [1.0, float("inf"), 2.0]}, r'record 2: column "age" holds inf \(not finite\)'),
        ({"label": ["yes", "maybe", "no"]}, r'record 2: label "maybe" is not in dataset.classes'),
        ({"sex": ["f", "x", "m"]}, r'record 2: column "sex" holds "x", not in dataset'),
        ({"age": [1.0, None, 2.0]}, r'record 2: no value in column "age"'),
    ],
)
def test_bad_records_stop_the_read_or_are_skipped(tmp_path, rows, expected):
    table = {"age": [30.0, 41.5, 58.0], "sex": ["f", "m", "f"], "label": ["yes", "no", "no"]}
    table.update(rows)
    pq.write_table(pa.table(table), tmp_path / "t.parquet")
    with pytest.raises(DataError, match=rf"t\.parquet {expected}"):
        read_node_data(tmp_path / "t.parquet", TABLE)
    data = read_node_data(
        tmp_path / "t.parquet", Task(**{**TABLE.__dict__, "on_bad_record": "skip"})
    )
    assert data.report.skipped == 1 and len(data.train.y) == 2


def test_a_text_column_where_the_task_wants_numbers_is_a_mismatch(tmp_path):
    pa_csv.write_csv(
        pa.table({"age": ["old", "young"], "sex": ["f", "m"], "label": ["no", "yes"]}),
        tmp_path / "t.csv",
    )
    report = read_node_data(tmp_path / "t.csv", TABLE).report
    assert mismatches(report, TABLE) == ['column "age" is text, the task says float']


def test_table_errors_name_the_file(tmp_path):
    pa_csv.write_csv(pa.table({"age": [1.0], "sex": ["f"]}), tmp_path / "nolabel.csv")
    with pytest.raises(DataError, match=r'nolabel\.csv: no label column "label"'):
        read_node_data(tmp_path / "nolabel.csv", TABLE)
    pa_csv.write_csv(_rows().slice(0, 0), tmp_path / "empty.csv")
    with pytest.raises(DataError, match=r"empty\.csv: the table has no rows"):
        read_node_data(tmp_path / "empty.csv", TABLE)
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(DataError, match=r"bad\.parquet: cannot read it as Parquet"):
        read_node_data(tmp_path / "bad.parquet", TABLE)
    site = tmp_path / "site"
    site.mkdir()
    pq.write_table(_rows(), site / "a.parquet")
    pq.write_table(_rows().drop_columns(["sex"]), site / "b.parquet")
    with pytest.raises(
        DataError,
        match=r"b\.parquet: another schema than .*a\.parquet \(sex: missing here, text there\)",
    ):
        read_node_data(site, TABLE)


def test_the_kind_is_detected_from_the_path(tmp_path):
    pa_csv.write_csv(_rows(), tmp_path / "a.csv")
    np.savez(tmp_path / "n.npz", x=np.zeros((2, 3), np.float32), y=np.array([0, 1]))
    assert detect_kind(tmp_path / "a.csv") == "table"
    assert detect_kind(tmp_path / "n.npz") == "npz"
    assert detect_kind(_folder(tmp_path / "imgs")) == "images"
    (tmp_path / "odd").mkdir()
    (tmp_path / "odd" / "notes.txt").write_text("x")
    with pytest.raises(DataError, match=r"odd: cannot tell what data this is"):
        detect_kind(tmp_path / "odd")


def test_npz_records_must_have_the_tasks_shape_and_labels(tmp_path):
    np.savez(tmp_path / "n.npz", x=np.zeros((2, 3), np.float32), y=np.array([0, 1]))
    assert read_node_data(tmp_path / "n.npz", TABLE).train.x.shape == (2, 3)
    np.savez(tmp_path / "w.npz", x=np.zeros((2, 4), np.float32), y=np.array([0, 1]))
    with pytest.raises(DataError, match=r"w\.npz: x holds records of shape \[4\]"):
        read_node_data(tmp_path / "w.npz", TABLE)
    np.savez(tmp_path / "l.npz", x=np.zeros((2, 3), np.float32), y=np.array([0, 2]))
    with pytest.raises(DataError, match=r"l\.npz: label 2 is outside dataset.classes"):
        read_node_data(tmp_path / "l.npz", TABLE)


def test_the_cache_serves_unchanged_files_and_notices_changes(tmp_path):
    root = _folder(tmp_path / "site")
    cache = tmp_path / "cache"
    first = read_node_data(root, IMAGES, cache_root=cache)
    (cached,) = (cache / "node-data").iterdir()
    assert sorted(f.name for f in cached.iterdir()) == ["report.json", "train_x.npy", "train_y.npy"]
    again = read_node_data(root, IMAGES, cache_root=cache)
    assert isinstance(again.train.x, np.memmap)  # mapped, not read: large nodes stream
    np.testing.assert_array_equal(first.train.x, again.train.x)
    assert again.report == first.report
    _image(root / "dog" / "d.png", 3)
    assert len(read_node_data(root, IMAGES, cache_root=cache).train.y) == 4


def test_normalisation_per_channel_and_per_numeric_feature():
    images = np.full((1, 3, 1, 1), 255, np.uint8)
    task = Task(
        kind="images",
        classes=("a", "b"),
        image_size=(1, 1),
        channels=3,
        mean=(0.5, 0.0, 1.0),
        std=(0.5, 2.0, 4.0),
    )
    np.testing.assert_allclose(normalised(images, task).ravel(), [1.0, 0.5, 0.0])
    rows = np.array([[10.0, 1.0, 0.0]], np.float32)
    table = Task(**{**TABLE.__dict__, "mean": (4.0,), "std": (2.0,)})
    np.testing.assert_array_equal(normalised(rows, table), [[3.0, 1.0, 0.0]])
    huge = np.array([[1e30, 0.0, 1.0]], np.float32)
    scaled = Task(**{**TABLE.__dict__, "mean": (1e30,), "std": (1e29,)})
    np.testing.assert_array_equal(normalised(huge, scaled), [[0.0, 0.0, 1.0]])


def test_the_task_orders_features_by_name_so_that_every_process_agrees():
    """A config travels as JSON with sorted keys: only the order by name survives the trip."""
    from fl_system.config.compose import compose_experiment
    from fl_system.settings.config_nodes import config_from_json, config_to_json

    cfg = compose_experiment(
        ["dataset=table", "dataset.classes=[no,yes]", "dataset.features={zeta:float,alpha:[b,a]}"]
    )
    here = Task.from_config(cfg)
    there = Task.from_config(config_from_json(config_to_json(cfg)))
    assert here == there
    assert [f.name for f in here.features] == ["alpha", "zeta"]
    assert here.features[0].categories == ("b", "a") and here.input_shape == (3,)
    assert cfg.model.input_shape == [3] and cfg.dataset.num_classes == 2


def test_a_regression_table_reads_its_label_as_a_number(tmp_path):
    task = Task(**{**TABLE.__dict__, "classes": (), "regression": True})
    rows = {"age": [30.0, 41.5, 58.0], "sex": ["f", "m", "f"], "label": [1.25, -3.0, 7.0]}
    pq.write_table(pa.table(rows), tmp_path / "r.parquet")
    data = read_node_data(tmp_path / "r.parquet", task)
    assert data.train.y.dtype == np.float32 and data.train.y.tolist() == [1.25, -3.0, 7.0]
    assert data.report.classes == ()
    rows["label"] = ["1.5", "many", "2"]
    pq.write_table(pa.table(rows), tmp_path / "bad.parquet")
    with pytest.raises(DataError, match=r'record 2: label "many" is not a finite number'):
        read_node_data(tmp_path / "bad.parquet", task)


def test_fl_client_gives_its_node_the_data_path_kind_and_name(tmp_path):
    from fl_system.deploy.client import DeployError, node_config, parse_args

    pa_csv.write_csv(_rows(), tmp_path / "a.csv")
    base = ["--server", "h:9092", "--partition-id", "1", "--num-partitions", "3", "--insecure"]
    args = parse_args(
        [*base, "--data", str(tmp_path / "a.csv"), "--data-kind", "table", "--name", "clinic-b"]
    )
    assert node_config(args) == (
        f'partition-id=1 num-partitions=3 data="{tmp_path / "a.csv"}" data-kind="table" '
        'name="clinic-b"'
    )
    old = parse_args([*base, "--data-dir", str(tmp_path / "a.csv")])  # the old spelling
    assert f'data="{tmp_path / "a.csv"}"' in node_config(old)
    with pytest.raises(DeployError, match=r"--data: nothing at .*missing"):
        node_config(parse_args([*base, "--data", str(tmp_path / "missing")]))


def test_central_evaluation_of_node_held_data_reads_the_servers_own_test_data(tmp_path):
    from fl_system.config.compose import compose_experiment
    from fl_system.config.experiment import central_test_set
    from fl_system.settings.value_checks import ConfigError

    pa_csv.write_csv(_rows(), tmp_path / "held.csv")
    task = [
        "dataset=table",
        "dataset.classes=[no,yes]",
        "dataset.features={age:float,sex:[f,m]}",
        "dataset.mean=[40]",
        "dataset.std=[10]",
        "model=mlp",
    ]
    x, y = central_test_set(
        compose_experiment([*task, f"evaluation.central.data={tmp_path / 'held.csv'}"])
    )
    np.testing.assert_allclose(x[:, 0], [-1.0, 0.15, 1.8], rtol=1e-6)
    assert y.tolist() == [1, 0, 1]
    with pytest.raises(ConfigError, match=r"evaluation=central needs test data on the server"):
        central_test_set(compose_experiment(task))
    assert central_test_set(compose_experiment([*task, "evaluation=federated"])) is None


def test_many_images_are_decoded_by_worker_processes_alike(tmp_path, monkeypatch):
    """Past PARALLEL_FROM files a DataLoader's workers decode: same arrays, same order, the
    same bad-record handling as in this process."""
    from fl_system.data.node_data import images

    root = _folder(tmp_path / "site")
    for i in range(5):
        _image(root / "dog" / f"n{i}.png", 20 * i)
    _truncate(root / "cat" / "z.png")
    skipping = Task(**{**IMAGES.__dict__, "on_bad_record": "skip"})
    here = read_node_data(root, skipping)
    monkeypatch.setattr(images, "PARALLEL_FROM", 1)
    monkeypatch.setattr(images, "DECODE_BATCH", 2)
    assert images._workers(8) == min(images.MAX_WORKERS, os.cpu_count() or 1) >= 1
    there = read_node_data(root, skipping)
    np.testing.assert_array_equal(here.train.x, there.train.x)
    assert here.train.y.tolist() == there.train.y.tolist() and there.report.skipped == 1
    with pytest.raises(DataError, match=r"cat/z\.png: cannot decode the image"):
        read_node_data(root, IMAGES)

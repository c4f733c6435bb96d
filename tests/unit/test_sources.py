"""Dataset sources: bundled datasets, and real on-disk formats written here in tmp_path."""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

from fl_system.data import DataError, DatasetArrays
from fl_system.data.files import read_idx
from fl_system.data.sources import Cifar10, Cifar100, Digits, FashionMnist, Mnist, Mnist5k

# ---------------------------------------------------------------- bundled datasets


def _check_arrays(d: DatasetArrays, image_shape: tuple[int, ...], n_train: int, n_test: int):
    assert d.x_train.shape == (n_train, *image_shape)
    assert d.x_test.shape == (n_test, *image_shape)
    assert d.x_train.dtype == np.float32 and d.x_test.dtype == np.float32
    assert d.y_train.dtype == np.int64 and d.y_test.dtype == np.int64
    assert d.num_classes == 10
    assert set(np.unique(d.y_train)) == set(range(10)) == set(np.unique(d.y_test))
    assert d.groups is None


def _assert_stratified(d: DatasetArrays, fraction: float) -> None:
    y_all = np.concatenate([d.y_train, d.y_test])
    expected = np.bincount(y_all) * fraction
    assert np.all(np.abs(np.bincount(d.y_test) - expected) <= 1)


def test_digits_shapes_split_and_normalisation() -> None:
    d = Digits().load()
    _check_arrays(d, (1, 8, 8), 1437, 360)
    _assert_stratified(d, 0.2)
    # normalised with the hard-coded constants: roughly zero mean, unit spread
    assert abs(float(d.x_train.mean())) < 0.05
    assert 0.9 < float(d.x_train.std()) < 1.1


def test_mnist5k_shapes_and_split() -> None:
    d = Mnist5k().load()
    _check_arrays(d, (1, 28, 28), 4000, 1000)
    assert np.bincount(d.y_test).tolist() == [100] * 10
    # background pixels are exactly (0 - mean) / std
    assert float(d.x_train.min()) == pytest.approx(-0.1307 / 0.3081, abs=1e-6)


def test_split_is_seeded() -> None:
    a, b = Digits(split_seed=3).load(), Digits(split_seed=3)._read()
    c = Digits(split_seed=4).load()
    np.testing.assert_array_equal(a.x_train, b.x_train)
    np.testing.assert_array_equal(a.y_test, b.y_test)
    assert not np.array_equal(a.y_train, c.y_train)
    _assert_stratified(c, 0.2)


def test_load_is_cached_and_read_only() -> None:
    first = Digits(test_fraction=0.25).load()
    assert Digits(test_fraction=0.25).load() is first
    assert len(first.y_test) == 450
    with pytest.raises(ValueError, match="read-only"):
        first.x_train[0, 0, 0, 0] = 1.0


def test_bad_test_fraction() -> None:
    with pytest.raises(DataError, match="test_fraction"):
        Digits(test_fraction=1.5).load()


# ---------------------------------------------------------------- IDX (MNIST, Fashion-MNIST)

IDX_NAMES = {
    "train_x": "train-images-idx3-ubyte",
    "train_y": "train-labels-idx1-ubyte",
    "test_x": "t10k-images-idx3-ubyte",
    "test_y": "t10k-labels-idx1-ubyte",
}


def _idx_bytes(arr: np.ndarray) -> bytes:
    """The exact IDX layout: 0x0000, type 0x08 (ubyte), ndim, big-endian uint32 dims, data."""
    header = bytes([0, 0, 0x08, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape)
    return header + arr.astype(np.uint8).tobytes()


def _write_idx(path: Path, arr: np.ndarray, gz: bool) -> None:
    data = _idx_bytes(arr)
    if gz:
        with gzip.open(path.with_name(path.name + ".gz"), "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)


def _write_mnist_like(
    root: Path, folder: str, gz: bool, *, flat: bool = False, seed: int = 0
) -> dict[str, np.ndarray]:
    """The four IDX files in torchvision's layout (`<root>/<folder>/raw/`) or `flat` in root."""
    rng = np.random.default_rng(seed)
    arrays = {
        "train_x": rng.integers(0, 256, (6, 28, 28), dtype=np.uint8),
        "train_y": np.array([0, 1, 2, 9, 4, 5], dtype=np.uint8),
        "test_x": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
        "test_y": np.array([7, 8, 3], dtype=np.uint8),
    }
    arrays["train_x"][1, 2, 3] = 255
    arrays["train_x"][1, 2, 4] = 0
    raw = root if flat else root / folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for key, name in IDX_NAMES.items():
        _write_idx(raw / name, arrays[key], gz)
    return arrays


@pytest.mark.parametrize(
    ("gz", "flat"),
    [(False, False), (True, False), (True, True), (False, True)],
    ids=["torchvision-plain", "torchvision-gz", "flat-gz", "flat-plain"],
)
@pytest.mark.parametrize(
    ("source", "folder", "mean", "std"),
    [(Mnist, "MNIST", 0.1307, 0.3081), (FashionMnist, "FashionMNIST", 0.5, 0.5)],
)
def test_idx_sources_round_trip(
    tmp_path: Path, gz: bool, flat: bool, source: type, folder: str, mean: float, std: float
) -> None:
    arrays = _write_mnist_like(tmp_path, folder, gz, flat=flat)
    d = source(root=str(tmp_path)).load()
    assert d.x_train.shape == (6, 1, 28, 28) and d.x_test.shape == (3, 1, 28, 28)
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int64
    assert d.num_classes == 10
    np.testing.assert_array_equal(d.y_train, arrays["train_y"])
    np.testing.assert_array_equal(d.y_test, arrays["test_y"])
    assert d.x_train[1, 0, 2, 3] == pytest.approx((1.0 - mean) / std, rel=1e-6)
    assert d.x_train[1, 0, 2, 4] == pytest.approx((0.0 - mean) / std, rel=1e-6)
    expected = (arrays["test_x"].astype(np.float32) / 255 - mean) / std
    np.testing.assert_allclose(d.x_test[:, 0], expected, rtol=1e-5, atol=1e-6)


def test_idx_missing_file_names_the_path(tmp_path: Path) -> None:
    _write_mnist_like(tmp_path, "MNIST", gz=False)
    (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(DataError) as err:
        Mnist(root=tmp_path).load()
    raw = tmp_path / "MNIST" / "raw"
    assert str(err.value) == (
        f"MNIST: {raw} holds only part of the dataset: missing {raw}/t10k-labels-idx1-ubyte; "
        "(each file plain or .gz); pass dataset.source.download=true on a machine that is online"
    )


def test_idx_nothing_found_lists_every_place_and_the_debian_package(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    with pytest.raises(DataError) as err:
        FashionMnist(search=(str(a), str(b))).load()
    assert str(err.value) == (
        f"FashionMNIST not found: none of {a}/FashionMNIST/raw, {a}, {b}/FashionMNIST/raw, {b} "
        "holds train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
        "t10k-labels-idx1-ubyte; set dataset.source.root=DIR (a folder holding the files, or "
        "torchvision's layout under it); (each file plain or .gz); Debian and Ubuntu ship it: "
        "apt-get install dataset-fashion-mnist (the four files in "
        "/usr/share/datasets/fashion-mnist), or pass dataset.source.download=true on a machine "
        "that is online"
    )


def test_fmnist_searches_data_then_debian_by_default() -> None:
    assert FashionMnist().search == ("data", "/usr/share/datasets/fashion-mnist")
    assert Mnist().search == ("data",)


def test_search_takes_the_first_place_that_holds_the_files(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    kept = _write_mnist_like(second, "FashionMNIST", gz=True, flat=True, seed=1)
    d = FashionMnist(search=(str(first), str(second))).load()
    np.testing.assert_array_equal(d.y_test, kept["test_y"])
    shadowing = _write_mnist_like(first, "FashionMNIST", gz=False, seed=2)
    shadowing["test_y"] = np.array([1, 1, 1], np.uint8)
    _write_idx(first / "FashionMNIST" / "raw" / IDX_NAMES["test_y"], shadowing["test_y"], False)
    d = FashionMnist(search=(str(first), str(second)))._read()  # load() is cached per process
    assert d.y_test.tolist() == [1, 1, 1]  # ./data's copy wins over the system's
    d = FashionMnist(root=str(second), search=(str(first),)).load()
    np.testing.assert_array_equal(d.y_test, kept["test_y"])  # root: there only


def test_search_must_be_a_list_and_not_empty(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="must be a list of folders"):
        FashionMnist(search=str(tmp_path))
    with pytest.raises(DataError, match="set root=DIR or give search at least one folder"):
        Mnist(search=())


def test_config_searches_fl_data_root_then_debian(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hydra import compose, initialize_config_dir

    from fl_system.config.compose import CONF_DIR
    from fl_system.data.configured import load_dataset

    monkeypatch.setenv("FL_DATA_ROOT", str(tmp_path / "mine"))
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        cfg = compose("config", ["dataset=fmnist"])
        assert list(cfg.dataset.source.search) == [
            str(tmp_path / "mine"),
            "/usr/share/datasets/fashion-mnist",
        ]
        flat = tmp_path / "flat"
        arrays = _write_mnist_like(flat, "FashionMNIST", gz=True, flat=True)
        cfg = compose("config", ["dataset=fmnist", f"dataset.source.search=[{tmp_path}/no,{flat}]"])
    np.testing.assert_array_equal(load_dataset(cfg).y_train, arrays["train_y"])


def test_idx_corrupt_magic(tmp_path: Path) -> None:
    _write_mnist_like(tmp_path, "MNIST", gz=False)
    path = tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte"
    path.write_bytes(b"\x12\x34" + path.read_bytes()[2:])
    with pytest.raises(DataError, match="bad magic number 1234"):
        Mnist(root=tmp_path).load()


def test_idx_truncated_and_wrong_rank(tmp_path: Path) -> None:
    path = tmp_path / "a-idx"
    path.write_bytes(_idx_bytes(np.zeros((2, 3, 3), np.uint8))[:-1])
    with pytest.raises(DataError, match="promises shape"):
        read_idx(path)
    path.write_bytes(_idx_bytes(np.zeros((4,), np.uint8)))
    with pytest.raises(DataError, match="expected 3"):
        read_idx(path, expect_ndim=3)
    np.testing.assert_array_equal(read_idx(path), np.zeros(4, np.uint8))


def test_idx_label_count_mismatch(tmp_path: Path) -> None:
    _write_mnist_like(tmp_path, "MNIST", gz=True)
    raw = tmp_path / "MNIST" / "raw"
    _write_idx(raw / IDX_NAMES["train_y"], np.zeros(5, np.uint8), gz=True)
    with pytest.raises(DataError, match=r"6 images but .* 5 labels"):
        Mnist(root=tmp_path).load()


# ---------------------------------------------------------------- CIFAR pickles


def _cifar_batch(path: Path, n: int, label_key: bytes, labels: np.ndarray, seed: int) -> bytes:
    """One batch in the real layout: dict with bytes keys, data uint8 (n, 3072) row-major RGB."""
    data = np.random.default_rng(seed).integers(0, 256, (n, 3072), dtype=np.uint8)
    entry = {
        b"batch_label": b"testing batch",
        label_key: labels.tolist(),
        b"data": data,
        b"filenames": [f"img_{i}.png".encode() for i in range(n)],
    }
    with open(path, "wb") as f:
        pickle.dump(entry, f, protocol=2)
    return data


def test_cifar10_round_trip(tmp_path: Path) -> None:
    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    train = [
        _cifar_batch(base / f"data_batch_{i}", 2, b"labels", np.array([i, 9 - i]), i)
        for i in range(1, 6)
    ]
    test = _cifar_batch(base / "test_batch", 3, b"labels", np.array([3, 1, 4]), 99)
    d = Cifar10(root=tmp_path).load()
    assert d.x_train.shape == (10, 3, 32, 32) and d.x_test.shape == (3, 3, 32, 32)
    assert d.x_train.dtype == np.float32 and d.y_train.dtype == np.int64
    assert d.num_classes == 10
    assert d.y_train.tolist() == [1, 8, 2, 7, 3, 6, 4, 5, 5, 4]
    assert d.y_test.tolist() == [3, 1, 4]
    # sample 2 is batch 2's first image; channel G (offset 1024), row 2, column 3
    pixel = train[1][0, 1024 + 32 * 2 + 3] / 255.0
    assert d.x_train[2, 1, 2, 3] == pytest.approx((pixel - 0.4822) / 0.1994, rel=1e-5)
    pixel = test[2, 2048 + 32 * 31 + 0] / 255.0
    assert d.x_test[2, 2, 31, 0] == pytest.approx((pixel - 0.4465) / 0.2010, rel=1e-5)


def test_cifar100_round_trip(tmp_path: Path) -> None:
    base = tmp_path / "cifar-100-python"
    base.mkdir()
    train = _cifar_batch(base / "train", 4, b"fine_labels", np.array([0, 99, 50, 7]), 1)
    _cifar_batch(base / "test", 2, b"fine_labels", np.array([98, 1]), 2)
    d = Cifar100(root=str(tmp_path)).load()
    assert d.x_train.shape == (4, 3, 32, 32) and d.x_test.shape == (2, 3, 32, 32)
    assert d.num_classes == 100
    assert d.y_train.tolist() == [0, 99, 50, 7] and d.y_test.tolist() == [98, 1]
    pixel = train[3, 0 + 32 * 5 + 6] / 255.0
    assert d.x_train[3, 0, 5, 6] == pytest.approx((pixel - 0.5071) / 0.2673, rel=1e-5)


def test_cifar_flat_folder(tmp_path: Path) -> None:
    """A folder holding the batches themselves (an unpacked archive's contents) loads too."""
    for i in range(1, 6):
        _cifar_batch(tmp_path / f"data_batch_{i}", 1, b"labels", np.array([i]), i)
    _cifar_batch(tmp_path / "test_batch", 2, b"labels", np.array([0, 9]), 9)
    d = Cifar10(search=(str(tmp_path / "elsewhere"), str(tmp_path))).load()
    assert d.y_train.tolist() == [1, 2, 3, 4, 5] and d.y_test.tolist() == [0, 9]


def test_cifar_missing_file_names_the_path(tmp_path: Path) -> None:
    base = tmp_path / "cifar-10-batches-py"
    base.mkdir()
    for i in range(1, 6):
        _cifar_batch(base / f"data_batch_{i}", 1, b"labels", np.array([0]), i)
    with pytest.raises(DataError) as err:
        Cifar10(root=tmp_path).load()
    assert str(base / "test_batch") in str(err.value)
    assert "download=true" in str(err.value)


def test_cifar_wrong_label_key_and_corrupt_pickle(tmp_path: Path) -> None:
    base = tmp_path / "cifar-100-python"
    base.mkdir()
    _cifar_batch(base / "train", 2, b"labels", np.array([0, 1]), 0)  # CIFAR-10 key
    _cifar_batch(base / "test", 2, b"fine_labels", np.array([0, 1]), 0)
    with pytest.raises(DataError, match="fine_labels"):
        Cifar100(root=tmp_path).load()
    (base / "train").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="cannot read CIFAR pickle"):
        Cifar100(root=tmp_path).load()

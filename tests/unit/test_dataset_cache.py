"""Parsed datasets and their partitions on disk: built once, read back bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

import fl_system.data.configured as configured
import fl_system.data.sources as sources
from fl_system.data.dataset_cache import (
    cache_dir,
    cached_arrays,
    mapped_briefly,
    read_arrays,
    write_arrays,
)
from fl_system.settings.config_nodes import build


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FL_CACHE_DIR", str(tmp_path / "cache"))
    sources._cached_load.cache_clear()
    configured._dataset.cache_clear()
    configured._partitions.cache_clear()
    yield tmp_path / "cache"
    sources._cached_load.cache_clear()
    configured._dataset.cache_clear()
    configured._partitions.cache_clear()


def test_arrays_are_built_once_and_read_back_identical() -> None:
    calls = []

    def build() -> dict[str, np.ndarray]:
        calls.append(1)
        return {"a": np.arange(5, dtype=np.int64), "b": np.float32([1e-30, 3.5e38])}

    first = cached_arrays({"k": 1}, build)
    again = cached_arrays({"k": 1}, build)
    assert len(calls) == 1
    for name in ("a", "b"):
        assert again[name].dtype == first[name].dtype
        assert np.array_equal(again[name], first[name])
    cached_arrays({"k": 2}, build)  # another identity is another entry
    assert len(calls) == 2


def test_arrays_come_back_mapped_and_read_only_empty_and_scalar_ones_too() -> None:
    arrays = {"big": np.arange(100_000.0), "empty": np.zeros((0, 3)), "scalar": np.int64(7)}
    cached_arrays({"k": 1}, lambda: arrays)
    again = cached_arrays({"k": 1}, lambda: pytest.fail("built twice"))
    assert isinstance(again["big"], np.memmap)  # pages shared by every process that maps it
    for name, want in arrays.items():
        got = again[name]
        assert got.shape == np.shape(want) and np.array_equal(got, want)
        assert not got.flags.writeable


def test_a_damaged_entry_is_built_again(private_cache: Path) -> None:
    cached_arrays({"k": 1}, lambda: {"a": np.ones(3)})
    (cache_dir({"k": 1}) / "a.npy").write_bytes(b"not an npy")
    assert np.array_equal(cached_arrays({"k": 1}, lambda: {"a": np.zeros(3)})["a"], np.zeros(3))
    assert np.array_equal(read_arrays(cache_dir({"k": 1}))["a"], np.zeros(3))


def test_an_entry_another_process_wrote_first_is_kept() -> None:
    folder = cache_dir({"k": 1})
    assert write_arrays(folder, {"a": np.ones(3)})
    assert write_arrays(folder, {"a": np.zeros(3)})  # the race's loser: its copy is dropped
    assert np.array_equal(read_arrays(folder)["a"], np.ones(3))
    assert sorted(p.name for p in folder.parent.iterdir()) == [folder.name]  # nothing left over


def test_an_unwritable_cache_still_returns_the_arrays(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("FL_CACHE_DIR", str(blocker))
    assert np.array_equal(cached_arrays({"k": 1}, lambda: {"a": np.ones(2)})["a"], np.ones(2))


@pytest.mark.parametrize("source", [sources.Digits(), sources.Synthetic(num_users=4)])
def test_a_cached_source_loads_what_it_parses(source: sources._Source) -> None:
    parsed = source._read()
    cold = source.load()
    sources._cached_load.cache_clear()
    warm = source.load()  # from the file now
    assert read_arrays(cache_dir({"dataset": source.cache_identity()})) is not None
    for data in (cold, warm):
        assert data.num_classes == parsed.num_classes
        for name in ("x_train", "y_train", "x_test", "y_test", "groups"):
            want, got = getattr(parsed, name), getattr(data, name)
            if want is None:
                assert got is None
                continue
            assert got.dtype == want.dtype and np.array_equal(got, want)
            assert not got.flags.writeable


def test_the_identity_names_the_arguments_and_the_data_package() -> None:
    identity = sources.Digits(split_seed=3).cache_identity()
    assert identity["source"] == "Digits"
    assert identity["args"] == {"test_fraction": 0.2, "split_seed": 3}
    assert set(identity["packages"]) == {"scikit-learn", "numpy"}
    assert sources.Digits(split_seed=4).cache_identity() != identity


def test_partitions_are_cached_and_identical_to_a_fresh_split(private_cache: Path) -> None:
    cfg = OmegaConf.create(
        {
            "dataset": {"source": {"_target_": "fl_system.data.sources.Digits"}},
            "partition": {
                "_target_": "fl_system.data.partitions.DirichletPartition",
                "alpha": 0.5,
            },
            "seed": 1,
        }
    )
    first = configured.partition_indices(cfg, 4)
    files = set((private_cache / "arrays").iterdir())
    configured._partitions.cache_clear()
    again = configured.partition_indices(cfg, 4)
    assert set((private_cache / "arrays").iterdir()) == files  # read, not written again
    data = sources.Digits().load()
    fresh = build(cfg.partition).split(data.y_train, 4, 1)
    for got, cached, want in zip(first, again, fresh, strict=True):
        assert np.array_equal(got, want) and np.array_equal(cached, want)


def test_rows_read_through_a_brief_mapping_stay_valid_after_it_closes() -> None:
    values = np.arange(40_000, dtype=np.float32).reshape(10_000, 4)
    mapped = cached_arrays({"k": 1}, lambda: {"x": values})["x"]
    with mapped_briefly(mapped) as brief:
        assert brief is not mapped and brief.filename == mapped.filename
        rows = brief[[3, 9_999]]
    assert np.array_equal(rows, values[[3, 9_999]])
    assert np.array_equal(mapped[5], values[5])  # the lasting mapping is untouched
    plain = np.ones(3)
    with mapped_briefly(plain) as same:  # not from the cache: itself
        assert same is plain

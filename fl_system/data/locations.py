"""Where a dataset's files are looked for: which folders, in which layouts, and what to say
when none holds them.

torchvision keeps a dataset in a folder of its own under the root (`<root>/FashionMNIST/raw/`,
`<root>/cifar-10-batches-py/`); Debian's `dataset-fashion-mnist` and most hand-made copies hold
the files flat in one folder. Both layouts are tried in every place. A source given `root`
looks there only; without one it tries its `search` places in order, so a copy under ./data
wins over the system's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from fl_system.data.files import DataError

DEBIAN_FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
DEBIAN_FASHION_MNIST_HINT = (
    "Debian and Ubuntu ship it: apt-get install dataset-fashion-mnist "
    f"(the four files in {DEBIAN_FASHION_MNIST})"
)


def places(root: str | Path | None, search: Sequence[str | Path]) -> list[Path]:
    """The folders to look in: `root` alone when it is set, else every `search` place."""
    return [Path(root)] if root is not None else [Path(p) for p in search]


def candidates(bases: Sequence[Path], own_folder: str) -> list[Path]:
    """torchvision's layout (`<base>/<own_folder>`) first, then the flat one (`<base>`)."""
    return [folder for base in bases for folder in (base / own_folder, base)]


def locate(
    dataset: str,
    folders: Sequence[Path],
    names: Sequence[str],
    has: Callable[[Path, str], bool],
    hint: str,
) -> Path:
    """The first folder holding every one of `names`. Else one `DataError`: the files a folder
    lacks when it holds some of them, or every folder looked in when none does."""
    partial: tuple[Path, list[str]] | None = None
    for folder in folders:
        missing = [n for n in names if not has(folder, n)]
        if not missing:
            return folder
        if partial is None and len(missing) < len(names):
            partial = (folder, missing)
    if partial is not None:
        folder, missing = partial
        raise DataError(
            f"{dataset}: {folder} holds only part of the dataset: missing "
            f"{', '.join(str(folder / n) for n in missing)}; {hint}"
        )
    looked = ", ".join(str(f) for f in folders)
    raise DataError(
        f"{dataset} not found: none of {looked} holds {', '.join(names)}; "
        f"set dataset.source.root=DIR (a folder holding the files, or torchvision's layout "
        f"under it); {hint}"
    )

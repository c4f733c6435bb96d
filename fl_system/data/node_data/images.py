"""Image folders (torchvision's ImageFolder layout): `PATH/<class name>/*.png|jpg|...`, or
`PATH/train/<class name>/...` with an optional `PATH/test/<class name>/...`.

Images of any size and mode are decoded with Pillow, converted to the task's channels
(1: greyscale, 3: RGB) and resized (bilinear) to its image size. A class folder whose name is
not in `dataset.classes` is reported, not read: the server refuses the node by name.
"""

from __future__ import annotations

import io
import multiprocessing
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from fl_system.data.files import DataError
from fl_system.data.node_data.records import BadRecords, Part, Read
from fl_system.data.node_data.task import Task

SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
PARALLEL_FROM = 2000  # files from which a DataLoader's workers decode them
MAX_WORKERS = 4
DECODE_BATCH = 256
PARTS = ("train", "test")


def is_image_folder(path: Path) -> bool:
    """A folder whose subfolders (or its train/'s) hold image files."""
    root = path / "train" if (path / "train").is_dir() else path
    return any(child.is_dir() and any(_images(child)) for child in _listing(root) if child.is_dir())


def read_image_folder(path: Path, task: Task) -> Read:
    """Every image of every class folder named in the task, decoded (by worker processes
    when there are many)."""
    bad = BadRecords(task.on_bad_record)
    found: set[str] = set()
    modes: set[str] = set()
    parts = {}
    for name, root in _parts(path).items():
        folders = _class_folders(root)
        found |= set(folders)
        files, labels = [], []
        for label, cls in enumerate(task.classes):
            files += folders.get(cls, [])
            labels += [label] * len(folders.get(cls, []))
        assert task.channels is not None and task.image_size is not None
        x = np.zeros((len(files), task.channels, *task.image_size), np.uint8)
        keep = np.ones(len(files), dtype=bool)
        for i, (pixels, mode, problem) in _decoded(files, task):
            if problem is not None:
                bad.found(str(files[i]), problem)
                keep[i] = False
            else:
                x[i] = pixels
                modes.add(mode)
        y = np.asarray(labels, dtype=np.int64)
        parts[name] = Part(x if keep.all() else x[keep], y[keep])
    return Read(
        parts, classes=tuple(sorted(found)), image_modes=tuple(sorted(modes)), skipped=bad.count
    )


def class_names(path: Path) -> set[str]:
    """The names of the node's class folders, in every part (no image is opened)."""
    return {name for root in _parts(path).values() for name in _class_folders(root)}


Decoded = tuple[np.ndarray | None, str | None, str | None]  # pixels, mode, problem


def decode(source: Path | bytes, task: Task) -> Decoded:
    """One image as uint8 (C, H, W) in the task's channels and size, and its mode as read;
    or why it cannot be read."""
    try:
        with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as img:
            mode = img.mode
            img = img.convert("L" if task.channels == 1 else "RGB")  # decodes: truncation shows
            assert task.image_size is not None
            height, width = task.image_size
            if img.size != (width, height):
                img = img.resize((width, height), Image.Resampling.BILINEAR)
            pixels = np.asarray(img, dtype=np.uint8)
    except UnidentifiedImageError:
        return None, None, "not an image Pillow can read"
    except (OSError, ValueError, SyntaxError) as err:  # truncated, corrupt, unreadable
        return None, None, f"cannot decode the image ({err})"
    return (pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)), mode, None


def decode_image(
    source: Path | bytes, task: Task, bad: BadRecords, modes: set[str], where: str = ""
) -> np.ndarray | None:
    """One image decoded; a bad one stops the read or is skipped (None), as `bad` says."""
    pixels, mode, problem = decode(source, task)
    if problem is not None:
        bad.found(where or str(source), problem)
        return None
    assert mode is not None
    modes.add(mode)
    return pixels


class _Files:
    """A torch Dataset of image files: item i is (i, its decoding)."""

    def __init__(self, files: list[Path], task: Task) -> None:
        self.files = files
        self.task = task

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, i: int) -> tuple[int, Decoded]:
        return i, decode(self.files[i], self.task)


def _decoded(files: list[Path], task: Task) -> Iterator[tuple[int, Decoded]]:
    """Each file's decoding, in order: in this process for a few files, else through a
    DataLoader whose worker processes decode batches of them."""
    workers = _workers(len(files))
    if workers == 0:
        yield from (_Files(files, task)[i] for i in range(len(files)))
        return
    from torch.utils.data import DataLoader  # torch only for folders large enough

    loader = DataLoader(
        _Files(files, task),
        batch_size=DECODE_BATCH,
        num_workers=workers,
        collate_fn=list,
        multiprocessing_context="fork",
    )
    for batch in loader:
        yield from batch


def _workers(count: int) -> int:
    """Decoding processes for `count` files: none below PARALLEL_FROM (starting workers
    costs more), and none in a daemonic process (which may not have children)."""
    if count < PARALLEL_FROM or multiprocessing.current_process().daemon:
        return 0
    return min(MAX_WORKERS, os.cpu_count() or 1)


def _parts(path: Path) -> dict[str, Path]:
    if (path / "train").is_dir():
        return {p: path / p for p in PARTS if (path / p).is_dir()}
    return {"train": path}


def _class_folders(root: Path) -> dict[str, list[Path]]:
    """Class name -> its image files, sorted; an empty class folder is an error."""
    folders = {}
    for child in _listing(root):
        if not child.is_dir():
            continue
        files = sorted(_images(child))
        if not files:
            raise DataError(f"{child}: empty class folder (no {', '.join(SUFFIXES)} files)")
        folders[child.name] = files
    if not folders:
        raise DataError(
            f"{root}: no class folders; expected {root}/<class name>/*.png (or .jpg, ...)"
        )
    return folders


def _images(folder: Path) -> Iterable[Path]:
    return (
        f for f in _listing(folder) if f.suffix.lower() in SUFFIXES and not f.name.startswith(".")
    )


def _listing(folder: Path) -> list[Path]:
    """A folder's entries, sorted; unreadable folders and symlink loops as DataErrors."""
    try:
        folder.resolve(strict=True)  # a symlink loop fails here, not deep in a listing
        return sorted(folder.iterdir())
    except RuntimeError as err:  # Path.resolve's "Symlink loop"
        raise DataError(f"{folder}: symbolic link loop ({err})") from None
    except OSError as err:
        raise DataError(f"{folder}: cannot read the folder ({err.strerror or err})") from None

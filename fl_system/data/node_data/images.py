"""Image folders (torchvision's ImageFolder layout): `PATH/<class name>/*.png|jpg|...`, or
`PATH/train/<class name>/...` with an optional `PATH/test/<class name>/...`.

Images of any size and mode are decoded with Pillow, converted to the task's channels
(1: greyscale, 3: RGB) and resized (bilinear) to its image size. A class folder whose name is
not in `dataset.classes` is reported, not read: the server refuses the node by name.
"""

from __future__ import annotations

import io
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from fl_system.data.files import DataError
from fl_system.data.node_data.records import BadRecords, Part, Read
from fl_system.data.node_data.task import Task

SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".webp")
PARTS = ("train", "test")


def is_image_folder(path: Path) -> bool:
    """A folder whose subfolders (or its train/'s) hold image files."""
    root = path / "train" if (path / "train").is_dir() else path
    return any(child.is_dir() and any(_images(child)) for child in _listing(root) if child.is_dir())


def read_image_folder(path: Path, task: Task) -> Read:
    """Every image of every class folder named in the task, decoded."""
    bad = BadRecords(task.on_bad_record)
    found: set[str] = set()
    modes: set[str] = set()
    parts = {}
    for name, root in _parts(path).items():
        folders = _class_folders(root)
        found |= set(folders)
        xs, ys = [], []
        for label, cls in enumerate(task.classes):
            for file in folders.get(cls, []):
                decoded = decode_image(file, task, bad, modes)
                if decoded is not None:
                    xs.append(decoded)
                    ys.append(label)
        assert task.channels is not None and task.image_size is not None
        shape = (task.channels, *task.image_size)
        x = np.stack(xs) if xs else np.zeros((0, *shape), np.uint8)
        parts[name] = Part(x, np.asarray(ys, dtype=np.int64))
    return Read(
        parts, classes=tuple(sorted(found)), image_modes=tuple(sorted(modes)), skipped=bad.count
    )


def decode_image(
    source: Path | bytes, task: Task, bad: BadRecords, modes: set[str], where: str = ""
) -> np.ndarray | None:
    """One image as uint8 (C, H, W) in the task's channels and size; None if skipped."""
    where = where or str(source)
    try:
        with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as img:
            modes.add(img.mode)
            img = img.convert("L" if task.channels == 1 else "RGB")  # decodes: truncation shows
            assert task.image_size is not None
            height, width = task.image_size
            if img.size != (width, height):
                img = img.resize((width, height), Image.Resampling.BILINEAR)
            pixels = np.asarray(img, dtype=np.uint8)
    except UnidentifiedImageError:
        bad.found(where, "not an image Pillow can read")
        return None
    except (OSError, ValueError, SyntaxError) as err:  # truncated, corrupt, unreadable
        bad.found(where, f"cannot decode the image ({err})")
        return None
    return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)


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

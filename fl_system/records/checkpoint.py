"""The run's checkpoint: global model, strategy state, round and clock, in one .npz file.

Written atomically every `checkpoint.every` rounds and after the last (tmp file + fsync +
rename), read back with `resume=true`.
No pickles: arrays and one JSON header only, so a damaged or foreign file fails cleanly.
"""

from __future__ import annotations

import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_MODEL = "model/"
_STRATEGY = "strategy/"
_META = "meta"
FORMAT = 1


class CheckpointError(RuntimeError):
    """The checkpoint is missing, unreadable, or belongs to another experiment."""


@dataclass(frozen=True)
class Checkpoint:
    round: int
    model: dict[str, np.ndarray]  # layer name -> array, in model order
    strategy_state: dict[str, np.ndarray]
    elapsed_seconds: float
    config: dict


def save_checkpoint(path: Path, ckpt: Checkpoint) -> None:
    meta = {
        "format": FORMAT,
        "round": ckpt.round,
        "elapsed_seconds": ckpt.elapsed_seconds,
        "model_keys": list(ckpt.model),
        "config": ckpt.config,
    }
    arrays = {f"{_MODEL}{i}": v for i, v in enumerate(ckpt.model.values())}
    arrays.update({f"{_STRATEGY}{k}": np.asarray(v) for k, v in ckpt.strategy_state.items()})
    arrays[_META] = np.array(json.dumps(meta))
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def checkpoint_round(path: Path) -> int | None:
    """The round a checkpoint holds, its header read alone (None: no readable checkpoint)."""
    try:
        with np.load(path, allow_pickle=False) as data:
            return int(json.loads(str(data[_META]))["round"])
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile):
        return None


def load_checkpoint(path: Path) -> Checkpoint:
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}: nothing to resume")
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data[_META]))
            if meta.get("format") != FORMAT:
                raise CheckpointError(f"{path}: unknown checkpoint format {meta.get('format')}")
            keys = meta["model_keys"]
            model = {k: data[f"{_MODEL}{i}"] for i, k in enumerate(keys)}
            strategy = {
                name[len(_STRATEGY) :]: data[name]
                for name in data.files
                if name.startswith(_STRATEGY)
            }
            return Checkpoint(
                round=int(meta["round"]),
                model=model,
                strategy_state=strategy,
                elapsed_seconds=float(meta["elapsed_seconds"]),
                config=meta["config"],
            )
    except CheckpointError:
        raise
    except (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile) as err:
        raise CheckpointError(f"checkpoint {path} is corrupt or unreadable ({err})") from err

"""What the trackers wrote, read back with each tracker's own reader: MlflowClient over the
run's store, TensorBoard's event accumulator, and W&B's offline run files."""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

from mlflow.entities import Run
from mlflow.tracking import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from wandb.proto import wandb_internal_pb2 as pb


def ids(run_dir: Path) -> dict[str, dict]:
    """tracking.json: each tracker's run id, last round and status."""
    return json.loads((run_dir / "tracking.json").read_text())


def mlflow_run(store: Path, run_dir: Path) -> tuple[MlflowClient, Run]:
    client = MlflowClient(f"sqlite:///{store}")
    return client, client.get_run(ids(run_dir)["mlflow"]["id"])


def mlflow_steps(client: MlflowClient, run: Run, key: str) -> list[int]:
    return [m.step for m in client.get_metric_history(run.info.run_id, key)]


def tensorboard(run_dir: Path) -> EventAccumulator:
    every = {"scalars": 0, "tensors": 0}  # 0: keep every event
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance=every)
    events.Reload()
    return events


def tensorboard_texts(events: EventAccumulator, tag: str) -> list[str]:
    return [t.tensor_proto.string_val[0].decode() for t in events.Tensors(tag)]


@dataclass
class WandbRun:
    """One offline run directory's records (a resumed run adds another directory)."""

    run_id: str = ""
    group: str = ""
    history: dict[int, dict[str, float]] = field(default_factory=dict)
    timestamps: dict[int, float] = field(default_factory=dict)  # step -> its _timestamp
    summary: dict[str, object] = field(default_factory=dict)
    exit_code: int | None = None


def wandb_runs(run_dir: Path) -> list[WandbRun]:
    """Every offline run under `run_dir/wandb`, oldest first."""
    out = []
    for path in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        run = WandbRun()
        for record in _records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.run_id, run.group = record.run.run_id, record.run.run_group
            elif kind == "history":
                items = {_key(i): json.loads(i.value_json) for i in record.history.item}
                step = int(items.pop("_step"))
                run.timestamps[step] = float(items["_timestamp"])
                run.history[step] = {k: v for k, v in items.items() if not k.startswith("_")}
            elif kind == "summary":
                run.summary.update(
                    {_key(i): json.loads(i.value_json) for i in record.summary.update}
                )
            elif kind == "exit":
                run.exit_code = record.exit.exit_code
        out.append(run)
    return out


def _key(item: pb.HistoryItem | pb.SummaryItem) -> str:
    return item.key or "/".join(item.nested_key)


_BLOCK, _HEADER = 32768, 7
_FULL, _FIRST, _LAST = 1, 2, 4


def _records(path: Path) -> list[pb.Record]:
    """W&B's run file, as `wandb sync` reads it: a LevelDB-style log (header `:W&B`, magic
    0xBEE1, version 0; then 32 KiB blocks of chunks, each with a CRC-32, a length and a type:
    full, first, middle, last), each whole record a serialised `wandb.proto.Record`."""
    data = path.read_bytes()
    assert struct.unpack("<4sHB", data[:_HEADER]) == (b":W&B", 0xBEE1, 0), "not a W&B run file"
    out, pending, at = [], b"", _HEADER
    while at + _HEADER <= len(data):
        left = _BLOCK - at % _BLOCK
        if left < _HEADER:  # the block's tail is padding
            at += left
            continue
        _, length, kind = struct.unpack("<IHB", data[at : at + _HEADER])
        if kind == 0:  # zeros: the end of what was written
            break
        chunk = data[at + _HEADER : at + _HEADER + length]
        at += _HEADER + length
        pending = chunk if kind in (_FULL, _FIRST) else pending + chunk
        if kind in (_FULL, _LAST):
            record = pb.Record()
            record.ParseFromString(pending)
            out.append(record)
    return out

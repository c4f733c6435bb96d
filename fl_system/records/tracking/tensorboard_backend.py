"""TensorBoard: event files in `<run dir>/<folder>`, one folder per run (a sweep's members
are the sweep's run directories), so `tensorboard --logdir outputs` shows every run.

Written with TensorBoard's own event writer and protos (no torch, no TensorFlow: fl-run can
mark a stopped run without importing either). A resumed run adds a new event file to the same
folder, which TensorBoard reads as one run; each step is written once, as for every tracker.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tensorboard.compat.proto.event_pb2 import Event
from tensorboard.compat.proto.summary_pb2 import Summary, SummaryMetadata
from tensorboard.compat.proto.tensor_pb2 import TensorProto
from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
from tensorboard.plugins.text.plugin_data_pb2 import TextPluginData
from tensorboard.summary.writer.event_file_writer import EventFileWriter

from fl_system.records.tracking.base import RunInfo, Tracker, summary_scalars

_TEXT = SummaryMetadata(
    plugin_data=SummaryMetadata.PluginData(
        plugin_name="text", content=TextPluginData(version=0).SerializeToString()
    )
)


class TensorboardTracker(Tracker):
    def __init__(self, folder: str = "tensorboard") -> None:
        self.folder = folder
        self.writer: EventFileWriter | None = None

    def start(self, run: RunInfo, previous: str | None, at: float) -> str:
        self.writer = self._open(run)
        if previous is None:
            tags = "\n".join(f"- {k}: {v}" for k, v in run.tags.items())
            _text(self.writer, "tags", tags, at)
            _text(self.writer, "config", f"```\n{run.config_yaml}```", at)
            self.writer.flush()
        return run.run_id

    def log_round(self, step: int, metrics: Mapping[str, float], at: float) -> None:
        _scalars(self._writer, metrics, step, at)
        self._writer.flush()

    def log_summary(self, summary: Mapping[str, Any], step: int, at: float) -> None:
        scalars = summary_scalars(summary)
        _scalars(self._writer, {f"summary/{k}": v for k, v in scalars.items()}, step, at)

    def log_files(self, files: list[Path]) -> None:
        """They are in the run directory, beside the event files, already."""

    def end(self, status: str, error: str | None, at: float) -> None:
        _status(self._writer, status, error, at)
        self._writer.close()

    def mark_ended(
        self, run: RunInfo, run_id: str, status: str, error: str | None, at: float
    ) -> None:
        writer = self._open(run)
        _status(writer, status, error, at)
        writer.close()

    def _open(self, run: RunInfo) -> EventFileWriter:
        folder = run.run_dir / self.folder
        folder.mkdir(parents=True, exist_ok=True)
        return EventFileWriter(str(folder))

    @property
    def _writer(self) -> EventFileWriter:
        assert self.writer is not None, "start() first"
        return self.writer


def _scalars(writer: EventFileWriter, values: Mapping[str, float], step: int, at: float) -> None:
    summary = Summary(value=[Summary.Value(tag=k, simple_value=v) for k, v in values.items()])
    writer.add_event(Event(wall_time=at, step=step, summary=summary))


def _status(writer: EventFileWriter, status: str, error: str | None, at: float) -> None:
    _text(writer, "status", status + (f": {error}" if error else ""), at)


def _text(writer: EventFileWriter, tag: str, text: str, at: float) -> None:
    tensor = TensorProto(
        dtype="DT_STRING",
        string_val=[text.encode()],
        tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]),
    )
    value = Summary.Value(tag=tag, metadata=_TEXT, tensor=tensor)
    writer.add_event(Event(wall_time=at, step=0, summary=Summary(value=[value])))

"""What a node says about the data it holds (no rows), and how the server checks it.

At the handshake every node loads its data for the experiment's task and reports counts,
the class names it found, its columns and their types, its image modes and how many records
it skipped. The server compares that with the task before any training and names the node,
its path and the first mismatch (`mismatches`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from fl_system.data.node_data.task import Task

TEXT = "text"  # a column type as read: a column holding non-numeric values


@dataclass(frozen=True)
class NodeReport:
    """A node's data, described (Parameters: every field travels as JSON in the handshake).

    Parameters
    ----------
    path, kind : where the node's data is and how it was read (images, table, hf, npz).
    train_examples, test_examples : records usable for training and for evaluation
        (test 0: the node holds out a share of its training data instead).
    classes : the label values found, as text (class folders; a table's label values).
    columns : a table's columns and the types they were read as (float, int, text, ...).
    unconverted : numeric task columns none of whose values is a number.
    image_modes : the Pillow modes of the images (L, RGB, RGBA, P, ...).
    skipped : records left out under `dataset.on_bad_record=skip`.
    error : why the node could not read its data at all (then the rest is empty).
    """

    path: str
    kind: str = ""
    train_examples: int = 0
    test_examples: int = 0
    classes: tuple[str, ...] = ()
    columns: dict[str, str] = field(default_factory=dict)
    unconverted: tuple[str, ...] = ()
    image_modes: tuple[str, ...] = ()
    skipped: int = 0
    error: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> NodeReport:
        fields = json.loads(text)
        for key in ("classes", "unconverted", "image_modes"):
            fields[key] = tuple(fields.get(key, ()))
        return cls(**fields)


def mismatches(report: NodeReport, task: Task) -> list[str]:
    """Why this node's data does not fit the task (empty: it fits), each reason one phrase."""
    if report.error is not None:
        return [report.error]
    found = []
    if report.kind == "images":  # a table's unknown labels are bad records, not a mismatch
        found += [
            f'class folder "{c}" is not in dataset.classes'
            for c in report.classes
            if c not in task.classes
        ]
    if task.features is not None:
        if task.label_column not in report.columns:
            found.append(f'no label column "{task.label_column}" (dataset.label_column)')
        for feature in task.features:
            kind = report.columns.get(feature.name)
            if kind is None:
                found.append(f'no column "{feature.name}" (dataset.features)')
            elif feature.name in report.unconverted:
                found.append(f'column "{feature.name}" is {kind}, the task says {feature.type}')
    if report.train_examples == 0 and not found:
        found.append("no training examples")
    return found

"""The run's final model as trackers that keep models log it (MLflow): built as the server
builds it, with the checkpoint's weights, and an input example of the dataset's shape (its
signature, and the traced graph MLflow saves)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from fl_system.learning.app_supplied import model_from_app


@dataclass(frozen=True)
class FinalModel:
    """The trained model (a torch module in eval mode) and one input it takes."""

    module: Any
    example: np.ndarray


def final_model(cfg: DictConfig, checkpoint: Path) -> FinalModel | None:
    """None where the server holds no model of its own (model=app: each node's ClientApp
    builds it) or the dataset gives no input shape (a table's rows: the features' count is
    what the shape is, so it is known; a node's own data without one is not)."""
    shape = OmegaConf.select(cfg, "dataset.input_shape")
    if model_from_app(cfg) or shape is None:
        return None
    import torch

    from fl_system.learning.own_model import build_model
    from fl_system.records.checkpoint import load_checkpoint

    module = build_model(cfg)
    saved = load_checkpoint(checkpoint).model
    module.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in saved.items()})
    module.eval()
    # a batch of 2: MLflow's traced graph keeps a batch dimension only where the example's is > 1
    return FinalModel(module, np.zeros((2, *shape), dtype=np.float32))

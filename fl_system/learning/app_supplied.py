"""dataset=app and model=app: a Flower app of one's own loads the data and builds the model.

A strategy built with plain arguments (`Scaffold(num_clients=4)`) composes its experiment with
both: the nodes' ClientApp, made by `client_app.make_client_app(load_data=..., build_model=...)`,
supplies them, and the server starts from the arrays `strategy.start` is given. fl-run reads
the data and builds the model itself, so it refuses both in one line.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from fl_system.settings.value_checks import ConfigError


def data_from_app(cfg: DictConfig) -> bool:
    """Whether each node's ClientApp loads its data (dataset=app)."""
    return OmegaConf.select(cfg, "dataset.name") == "app"


def model_from_app(cfg: DictConfig) -> bool:
    """Whether each node's ClientApp builds the model (model=app)."""
    return OmegaConf.select(cfg, "model.name") == "app"


def refuse_in_fl_run(cfg: DictConfig) -> None:
    """fl-run loads data and builds models itself: dataset=app and model=app are refused."""
    for group, supplied in (("dataset", data_from_app), ("model", model_from_app)):
        if supplied(cfg):
            raise ConfigError(
                f"{group}=app is for a Flower app of your own (client_app.make_client_app); "
                "fl-run reads each node's data and builds the model itself: "
                + (
                    "dataset=images|table|hf|npz with runtime.node_data, or a shipped dataset"
                    if group == "dataset"
                    else "model=custom model._target_=pkg.module.Class, or a shipped model"
                )
            )


def check_app_data(cfg: DictConfig) -> None:
    """dataset=app: the number of labels, when a setting needs it, is a positive integer."""
    if not data_from_app(cfg):
        return
    num_classes = cfg.dataset.num_classes
    if num_classes is not None and (
        isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2
    ):
        raise ConfigError(f"num_classes must be an integer >= 2, got {num_classes!r}")
    if num_classes is None and OmegaConf.select(cfg, "algorithm.disco.enabled"):
        raise ConfigError(
            "FedDisco's label distributions need the number of labels: num_classes=<C> "
            "(dataset.num_classes)"
        )

"""dataset=app and model=app: what a Flower app of one's own supplies, and fl-run refuses."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from client_app.sources import as_labelled
from fl_system.config.compose import compose_experiment
from fl_system.data.files import DataError
from fl_system.learning.app_supplied import refuse_in_fl_run
from fl_system.learning.own_model import build_model
from fl_system.settings.value_checks import ConfigError


def test_fl_run_refuses_what_an_app_of_ones_own_supplies() -> None:
    with pytest.raises(ConfigError) as err:
        refuse_in_fl_run(compose_experiment(["dataset=app", "dataset.num_classes=3"]))
    assert str(err.value) == (
        "dataset=app is for a Flower app of your own (client_app.make_client_app); fl-run reads "
        "each node's data and builds the model itself: dataset=images|table|hf|npz with "
        "runtime.node_data, or a shipped dataset"
    )
    cfg = compose_experiment(["model=app"])
    with pytest.raises(ConfigError, match=r"^model=app is for a Flower app of your own"):
        refuse_in_fl_run(cfg)
    with pytest.raises(ConfigError, match=r"^model=app: each node's ClientApp builds the model"):
        build_model(cfg)


def test_disco_needs_the_number_of_labels_of_data_the_app_loads() -> None:
    with pytest.raises(ConfigError, match=r"^FedDisco's label distributions need the number"):
        compose_experiment(["dataset=app", "algorithm=feddisco"])
    with pytest.raises(ConfigError, match=r"^num_classes must be an integer >= 2, got 1$"):
        compose_experiment(["dataset=app", "dataset.num_classes=1"])
    assert compose_experiment(["dataset=app", "algorithm=scaffold"]).dataset.num_classes is None


def test_a_loaders_part_becomes_records_and_labels_whatever_its_form() -> None:
    x = np.arange(24, dtype=np.float64).reshape(6, 2, 2)
    y = np.array([0, 1, 2, 0, 1, 2])
    tensors = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    for part in ((x, y), (torch.from_numpy(x), torch.from_numpy(y)), tensors):
        got_x, got_y = as_labelled(part, "train")
        assert got_x.dtype == np.float32 and got_y.dtype == np.int64
        np.testing.assert_array_equal(got_x, x.astype(np.float32))
        np.testing.assert_array_equal(got_y, y)
    loader = DataLoader(tensors, batch_size=4, shuffle=False)
    np.testing.assert_array_equal(as_labelled(loader, "train")[1], y)
    dicts = DataLoader([{"img": x[i], "label": y[i]} for i in range(6)], batch_size=4)
    with pytest.raises(DataError, match=r"yields dict, not \(x, y\)"):
        as_labelled(dicts, "train")
    with pytest.raises(DataError, match=r"^load_data's test part has 6 records and 5 labels$"):
        as_labelled((x, y[:5]), "test")


def test_ones_own_loader_fails_at_the_handshake_not_in_round_1() -> None:
    from flwr.app import ConfigRecord, Context, Message, RecordDict
    from torch import nn

    from client_app.app import make_client_app
    from fl_system.messages import protocol
    from fl_system.settings.config_nodes import config_to_json

    def missing(partition_id: int, num_partitions: int):
        raise FileNotFoundError(f"/data/site-{partition_id}/digits.npz")

    app = make_client_app(load_data=missing, build_model=lambda: nn.Linear(64, 10))
    cfg = compose_experiment(["dataset=app", "model=app", "algorithm=scaffold"])
    handshake = Message(
        RecordDict({protocol.CONFIG: ConfigRecord({protocol.RUN_CONFIG: config_to_json(cfg)})}),
        dst_node_id=7,
        message_type=protocol.HANDSHAKE,
    )
    context = Context(
        run_id=1,
        node_id=7,
        node_config={"partition-id": 1, "num-partitions": 2},
        state=RecordDict(),
        run_config={},
    )
    with pytest.raises(FileNotFoundError, match=r"/data/site-1/digits\.npz"):
        app(handshake, context)

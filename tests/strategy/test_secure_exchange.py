"""What the server receives in a SecAgg+ round: five of this project's ClientApps (Flower's
secaggplus_mod in front of local training) called in this process, the server's half
(`SecureExchange`) between them through a courier that records every reply. No reply carries
an array, no masked vector is near its client's (scaled) update, and the round's model is
plain FedAvg's within the stated bound."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common import bytes_to_ndarray
from flwr.common.secure_aggregation.quantization import dequantize
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping, Strategy
from torch import nn

from client_app.app import make_client_app
from fl_system.addons.disco import DISCO_COUNTS, DISCO_TARGET
from fl_system.algorithms.scaffold import SCAFFOLD_C, SCAFFOLD_DELTA_C
from fl_system.config.compose import compose_experiment
from fl_system.learning.aggregation import normalized, weighted_average
from fl_system.messages import protocol
from fl_system.privacy.secagg import SecAggSettings, settings_of
from fl_system.settings.config_nodes import build, config_to_json
from fl_system.settings.value_checks import ConfigError
from server_app.exchange import Traffic
from server_app.federated.replies import ClientReply
from server_app.rounds import RunFailed
from server_app.secure_exchange import SecureExchange
from server_app.strategies.fedavg import FedAvg
from server_app.strategies.fednova import FedNova

NODES = [101, 102, 103, 104, 105]
SIZES = [40, 25, 60, 33, 50]  # examples per client


def _data(partition: int, _: int):
    rng = np.random.default_rng(partition)
    n = SIZES[partition]
    x = rng.normal(size=(n, 8)).astype(np.float32)
    return (x, (x[:, 0] > 0).astype(np.int64) + (x[:, 1] > 0)), None


def _model() -> nn.Module:
    return nn.Linear(8, 3)


class InProcess:
    """A courier that hands each message to its node's ClientApp here, and keeps every reply
    the server receives."""

    def __init__(self, cfg_json: str) -> None:
        self.app = make_client_app(load_data=_data, build_model=_model)
        self.contexts = {
            node: Context(1, node, {"partition-id": i, "num-partitions": 5}, RecordDict(), {})
            for i, node in enumerate(NODES)
        }
        self.received: list[RecordDict] = []  # copies: the strategy's replies are reused
        shake = RecordDict({protocol.CONFIG: ConfigRecord({protocol.RUN_CONFIG: cfg_json})})
        self.handshakes = [
            self.app(Message(shake, dst_node_id=node, message_type=protocol.HANDSHAKE), context)
            for node, context in self.contexts.items()
        ]

    def send(
        self, grid: object, messages: Sequence[Message], label: str, *, timeout: float | None = None
    ) -> Traffic:
        replies = []
        for message in messages:
            reply = self.app(message, self.contexts[message.metadata.dst_node_id])
            replies.append(reply)
        self.received += [copy.deepcopy(r.content) for r in replies]
        return Traffic(replies, 0, 0)


def _training(model: ArrayRecord, **config: object) -> list[Message]:
    config = ConfigRecord({protocol.SERVER_ROUND: 1, **config})  # type: ignore[arg-type]
    content = RecordDict({protocol.ARRAYS: model, protocol.CONFIG: config})
    return [
        Message(RecordDict(dict(content.items())), dst_node_id=n, message_type=MessageType.TRAIN)
        for n in NODES
    ]


def _by_examples(reports: list[ClientReply]) -> np.ndarray:
    return normalized([float(r.num_examples) for r in reports])


def test_the_server_receives_no_update_and_gets_fedavgs_model_within_the_bound() -> None:
    overrides = ["dataset=app", "dataset.num_classes=3", "model=app", "num_clients=5"]
    overrides += ["train.local_steps=3", "secagg=secaggplus", "secagg.clipping_range=0.5"]
    cfg = compose_experiment(overrides)
    settings = settings_of(cfg)
    assert isinstance(settings, SecAggSettings)
    model = ArrayRecord(_model().state_dict())
    start = model.to_numpy_ndarrays()

    plain = InProcess(config_to_json(cfg))
    replies = plain.send(None, _training(model), "train").replies
    trained = [r.content.array_records[protocol.ARRAYS].to_numpy_ndarrays() for r in replies]
    updates = [[t - s for t, s in zip(m, start, strict=True)] for m in trained]
    fedavg = weighted_average(trained, [float(n) for n in SIZES])

    courier = InProcess(config_to_json(cfg))
    exchange = SecureExchange(settings)
    secure, failed = exchange.send(courier, None, _training(model), _by_examples)  # type: ignore[arg-type]
    assert failed is None and len(secure) == 5
    for content in courier.received:  # every reply of every stage, as the server got it
        assert all(len(record) == 0 for record in content.array_records.values())
    masked = [
        c.config_records[RECORD_KEY_CONFIGS][Key.MASKED_PARAMETERS]
        for c in courier.received
        if Key.MASKED_PARAMETERS in c.config_records.get(RECORD_KEY_CONFIGS, {})
    ]
    assert len(masked) == 5
    weights = settings.weights([float(n) for n in SIZES])
    bound = settings.average_error_bound([float(n) for n in SIZES], 0.5)
    for vector in masked:
        layers = [bytes_to_ndarray(b) for b in vector][1:]  # the weight first, then the layers
        seen = dequantize(layers, settings.clipping_range, settings.quantization_range)
        for r, update in zip(weights, updates, strict=True):
            gap = max(float(np.max(np.abs(s - r * u))) for s, u in zip(seen, update, strict=True))
            assert gap > 1000 * bound, "a masked vector gives away a client's update"
    got = secure[0].content.array_records[protocol.ARRAYS].to_numpy_ndarrays()
    assert all(
        np.array_equal(got[0], r.content.array_records[protocol.ARRAYS].to_numpy_ndarrays()[0])
        for r in secure
    )
    for layer, want in zip(got, fedavg, strict=True):
        assert float(np.max(np.abs(layer - want))) <= bound
    assert secure[0].content.metric_records[protocol.METRICS][protocol.NUM_EXAMPLES] in SIZES
    recorded = [exchange.columns[f"weight_{i}"] for i in range(5)]
    assert np.allclose(recorded, normalized([float(n) for n in SIZES]), rtol=0, atol=1e-12)


def test_feddisco_target_global_sums_label_counts_securely_and_weighs_as_in_the_clear() -> None:
    """FedDisco with target=global under SecAgg+: no client sends its label counts, their
    secure sum is the exact total (so T is the clear run's), the weights the clients scale
    their updates by are the clear run's p_k (1e-6), and the model is the Disco-weighted
    average within the bound."""
    overrides = ["dataset=app", "dataset.num_classes=3", "model=app", "num_clients=5"]
    overrides += ["algorithm=feddisco", "algorithm.disco.target=global", "train.local_steps=3"]
    clear_cfg = compose_experiment(overrides)
    cfg = compose_experiment([*overrides, "secagg=secaggplus", "secagg.clipping_range=0.5"])
    settings = settings_of(cfg)
    assert isinstance(settings, SecAggSettings)
    model = ArrayRecord(_model().state_dict())

    clear = InProcess(config_to_json(clear_cfg))  # the clear run: counts at the handshake
    disco_clear = build(clear_cfg.algorithm.disco.server)
    for pid, reply in enumerate(clear.handshakes):
        disco_clear.on_join(pid, reply.content.metric_records[protocol.METRICS])
    target = disco_clear.shared_config()[DISCO_TARGET]
    replies = clear.send(None, _training(model, **{DISCO_TARGET: target}), "train").replies
    unpacked = [
        ClientReply(
            n,
            i,
            SIZES[i],
            r.content.array_records[protocol.ARRAYS].to_numpy_ndarrays(),
            r.content.metric_records[protocol.METRICS],
            r.content,
        )
        for i, (n, r) in enumerate(zip(NODES, replies, strict=True))
    ]
    p_clear = disco_clear.weights(unpacked)
    assert not np.allclose(p_clear, normalized([float(n) for n in SIZES]), atol=1e-3)
    disco_avg = weighted_average([r.arrays for r in unpacked], list(p_clear))

    courier = InProcess(config_to_json(cfg))
    for reply in courier.handshakes:
        assert DISCO_COUNTS not in reply.content.metric_records[protocol.METRICS]
    disco = build(cfg.algorithm.disco.server)
    exchange = SecureExchange(settings)
    assert disco.secure_sum() == DISCO_COUNTS
    asked = RecordDict({protocol.CONFIG: ConfigRecord({protocol.SECURE_SUM: DISCO_COUNTS})})
    question = [Message(copy.deepcopy(asked), n, MessageType.TRAIN) for n in NODES]
    total, clients = exchange.sum(courier, None, question)  # type: ignore[arg-type]
    exact = sum(np.bincount(_data(i, 5)[0][1], minlength=3) for i in range(5))
    assert clients == 5 and float(np.max(np.abs(total[0] - exact))) < 0.5
    disco.take_secure_sum(total)
    assert disco.secure_sum() is None and disco.shared_config()[DISCO_TARGET] == target

    messages = _training(model, **{DISCO_TARGET: target})
    secure, failed = exchange.send(courier, None, messages, disco.weights)  # type: ignore[arg-type]
    assert failed is None and len(secure) == 5
    p_secure = [exchange.columns[f"weight_{i}"] for i in range(5)]
    assert float(np.max(np.abs(np.asarray(p_secure) - p_clear))) <= 1e-6
    sent = [
        float(m.content.config_records[protocol.CONFIG][protocol.SECAGG_WEIGHT]) for m in messages
    ]
    bound = settings.average_error_bound(sent, 0.5)
    got = secure[0].content.array_records[protocol.ARRAYS].to_numpy_ndarrays()
    for layer, want in zip(got, disco_avg, strict=True):
        assert float(np.max(np.abs(layer - want))) <= bound


def test_a_round_that_sends_clients_different_models_is_refused() -> None:
    """The sum of updates means something only from one model (a strategy that sends each
    client its own copy is refused before any stage is sent)."""
    messages = _training(ArrayRecord(_model().state_dict()))
    messages[1].content[protocol.ARRAYS] = ArrayRecord(_model().state_dict())
    with pytest.raises(RunFailed, match="sums updates from one model: this round sent several"):
        SecureExchange(SecAggSettings()).send(None, None, messages, _by_examples)  # type: ignore[arg-type]


class _NothingSent:
    """A grid through which nothing may travel."""

    def send_and_receive(self, *args: object, **kwargs: object) -> list[Message]:
        raise AssertionError("a message was sent")


def test_flowers_own_loop_and_a_dp_wrappers_start_are_refused_under_secagg() -> None:
    """Flower's loop (its Strategy.start, which a DP wrapper's start is) would send every
    update in the clear: the strategy's configure_train refuses it before any message."""
    strategy = FedAvg(num_clients=3, options=["secagg=secaggplus", "privacy=client_fixed"])
    wrapped = DifferentialPrivacyClientSideFixedClipping(
        strategy, noise_multiplier=1.0, clipping_norm=1.0, num_sampled_clients=3
    )
    for loop in (strategy, wrapped):
        with pytest.raises(RunFailed) as refused:
            Strategy.start(loop, _NothingSent(), ArrayRecord(), num_rounds=1)  # type: ignore[arg-type]
        assert str(refused.value) == (
            "secagg=secaggplus: this loop would send every update in the clear (Flower's "
            "Strategy.start, a DP wrapper's start included); call the strategy's own start, "
            "which runs the training as SecAgg+"
        )


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (
            lambda: FedAvg(options=["secagg=secaggplus", "compression.up=topk"]),
            "secagg=secaggplus does not compose with compression.up=topk: masks need dense",
        ),
        (
            lambda: FedAvg(options=["secagg=secaggplus", "privacy=central_fixed"]),
            "secagg=secaggplus does not compose with privacy=central_fixed: the server clips",
        ),
        (
            lambda: FedNova(options=["secagg=secaggplus"]),
            "secagg=secaggplus does not compose with algorithm=fednova: it combines",
        ),
        (
            lambda: FedAvg(options=["secagg=secaggplus", "secagg.modulus_range=1000"]),
            "secagg=secaggplus: ",
        ),
    ],
)
def test_a_strategy_built_with_plain_arguments_refuses_what_fl_run_refuses(build, said) -> None:
    """The checks fl-run runs before it starts, in one line, as the strategy is built."""
    with pytest.raises(ConfigError) as refused:
        build()
    assert str(refused.value).startswith(said) and "\n" not in str(refused.value)


def test_scaffolds_control_variate_changes_are_summed_beside_the_update() -> None:
    """algorithm=scaffold under SecAgg+: each client's dc_k rides in its masked vector (sent
    as dc_k / r), no array reaches the server in the clear, every reply carries the mean of
    the dc_k, so that SCAFFOLD's sum over the replies is the plain sum within n 2c / T, and
    the model is FedAvg's within the bound."""
    overrides = ["dataset=app", "dataset.num_classes=3", "model=app", "num_clients=5"]
    overrides += ["algorithm=scaffold", "train.local_steps=3", "secagg=secaggplus"]
    cfg = compose_experiment([*overrides, "secagg.clipping_range=0.5"])
    settings = settings_of(cfg)
    assert isinstance(settings, SecAggSettings)
    model = ArrayRecord(_model().state_dict())
    c = ArrayRecord({k: Array(np.zeros_like(v.numpy())) for k, v in model.items()})

    def messages() -> list[Message]:
        out = _training(model)
        for m in out:
            m.content[SCAFFOLD_C] = c
        return out

    plain = InProcess(config_to_json(cfg))
    replies = plain.send(None, messages(), "train").replies
    trained = [r.content.array_records[protocol.ARRAYS].to_numpy_ndarrays() for r in replies]
    dc_sum = [sum(r.content.array_records[SCAFFOLD_DELTA_C][k].numpy() for r in replies) for k in c]
    assert all(float(np.max(np.abs(d))) > 1e-3 for d in dc_sum)  # something to carry

    courier = InProcess(config_to_json(cfg))
    exchange = SecureExchange(settings)
    secure, failed = exchange.send(courier, None, messages(), _by_examples, (SCAFFOLD_DELTA_C,))  # type: ignore[arg-type]
    assert failed is None and len(secure) == 5
    for content in courier.received:
        assert all(len(record) == 0 for record in content.array_records.values())
    carried = [sum(r.content.array_records[SCAFFOLD_DELTA_C][k].numpy() for r in secure) for k in c]
    bound = settings.sum_error_bound(5)
    for got, want in zip(carried, dc_sum, strict=True):
        assert float(np.max(np.abs(got - want))) <= bound
    fedavg = weighted_average(trained, [float(n) for n in SIZES])
    model_bound = settings.average_error_bound([float(n) for n in SIZES], 0.5)
    got = secure[0].content.array_records[protocol.ARRAYS].to_numpy_ndarrays()
    for layer, want in zip(got, fedavg, strict=True):
        assert float(np.max(np.abs(layer - want))) <= model_bound

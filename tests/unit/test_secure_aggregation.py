"""SecAgg+ end to end on plain records: Flower's own client mod (`secaggplus_mod`) on each of
five clients in this process, the server's half (`SecAggRound`) between them. The unmasked
result is the weighted average within the stated quantisation bound, at tiny and huge
scales, with a client dropped after sharing its keys too; too few survivors fail in one line."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.client.mod import secaggplus_mod
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
from flwr.compat.common import recorddict_compat as compat

from fl_system.privacy.secagg import SecAggSettings
from server_app.secure_aggregation import SecAggFailed, SecAggRound

NODES = [11, 22, 33, 44, 55]
WEIGHTS = {11: 10.0, 22: 20.0, 33: 30.0, 44: 40.0, 55: 50.0}


class Client:
    """One node: its Context (the mod keeps its state there) and its vector."""

    def __init__(self, nid: int, vector: list[np.ndarray]) -> None:
        self.nid, self.vector = nid, vector
        self.context = Context(0, nid, {}, RecordDict(), {})

    def answer(self, configs: ConfigRecord) -> ConfigRecord:
        message = Message(
            RecordDict({RECORD_KEY_CONFIGS: configs}),
            dst_node_id=self.nid,
            message_type=MessageType.TRAIN,
        )
        reply = secaggplus_mod(message, self.context, self._train)
        assert not reply.content.array_records or all(
            not len(r) for r in reply.content.array_records.values()
        ), "the mod sends no array in the clear"
        return reply.content.config_records[RECORD_KEY_CONFIGS]

    def _train(self, message: Message, context: Context) -> Message:
        fitres = FitRes(
            Status(Code.OK, ""), ndarrays_to_parameters(self.vector), int(WEIGHTS[self.nid]), {}
        )
        return Message(compat.fitres_to_recorddict(fitres, False), reply_to=message)


def _run(settings: SecAggSettings, clients: dict[int, Client], drop_at: dict[int, str]):
    """The four stages; a node in `drop_at` answers no more from that stage on."""
    protocol = SecAggRound(settings, list(clients))
    stages = ("setup", "share_keys", "collect", "unmask")
    asked = protocol.setup()
    for stage, following in zip(stages, (*stages[1:], "result"), strict=True):
        answering = [
            n for n in asked if n not in drop_at or stages.index(stage) < stages.index(drop_at[n])
        ]
        asked = getattr(protocol, following)({n: clients[n].answer(asked[n]) for n in answering})
    return asked


def _vectors(scale: float, seed: int = 0) -> dict[int, list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    return {
        nid: [rng.uniform(-1, 1, (3, 4)) * scale, rng.uniform(-1, 1, 5) * scale] for nid in NODES
    }


def _plain(vectors: dict[int, list[np.ndarray]], nids: list[int]) -> list[np.ndarray]:
    total = sum(WEIGHTS[n] for n in nids)
    return [sum(WEIGHTS[n] * vectors[n][i] for n in nids) / total for i in range(2)]


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_the_unmasked_average_is_the_weighted_average_within_the_bound(scale: float) -> None:
    """Clipping range 2x the largest weighted value (r <= 0.05 here): no value is clipped;
    the error is below n (2c + max|v|) / (T sum r), whatever the scale."""
    settings = SecAggSettings(
        clipping_range=0.1 * scale, num_shares=1.0, reconstruction_threshold=0.6
    )
    vectors = _vectors(scale)
    average, weight = _run(settings, {n: Client(n, v) for n, v in vectors.items()}, {})
    bound = settings.average_error_bound([WEIGHTS[n] for n in NODES], scale)
    assert weight == pytest.approx(sum(settings.weights(WEIGHTS.values())))
    for got, want in zip(average, _plain(vectors, NODES), strict=True):
        assert np.max(np.abs(got - want)) < bound
        assert bound < 1e-3 * scale  # and the bound is tight enough to mean something


@pytest.mark.parametrize("scale", [1e-6, 1.0, 1e6])
def test_a_plain_sum_carried_as_x_over_r_is_within_one_step_per_client(scale: float) -> None:
    """Each client sends x / r (r its quantised weight), so r (x / r) = x enters the sum
    unweighted (SCAFFOLD's dc_k): the average times the summed r is sum(x) within
    n 2c / T, whatever the scale."""
    settings = SecAggSettings(clipping_range=1.0 * scale, num_shares=1.0)
    terms = _vectors(scale, seed=2)
    ratio = dict(zip(NODES, settings.weights([WEIGHTS[n] for n in NODES]), strict=True))
    clients = {n: Client(n, [a / ratio[n] for a in x]) for n, x in terms.items()}
    average, weight = _run(settings, clients, {})
    bound = settings.sum_error_bound(len(NODES))
    assert bound < 1e-5 * scale
    for i, got in enumerate(average):
        want = sum(terms[n][i] for n in NODES)
        assert np.max(np.abs(got * weight - want)) < bound


@pytest.mark.parametrize(("shares", "threshold"), [(1.0, 0.6), (3, 2)])
def test_a_client_dropped_after_sharing_its_keys_is_left_out_of_the_sum(
    shares: float, threshold: float
) -> None:
    """Node 55 shares its keys, then trains no more: the others' pairwise masks with it are
    removed from its reconstructed key, and the result is the other four's average; with
    every node a neighbour of every other, and with 3 shares (each node and two neighbours:
    SecAgg+'s sparse graph)."""
    settings = SecAggSettings(
        clipping_range=0.1, num_shares=shares, reconstruction_threshold=threshold
    )
    vectors = _vectors(1.0, seed=1)
    average, _ = _run(settings, {n: Client(n, v) for n, v in vectors.items()}, {55: "collect"})
    kept = NODES[:4]
    bound = settings.average_error_bound([WEIGHTS[n] for n in kept], 1.0)
    for got, want in zip(average, _plain(vectors, kept), strict=True):
        assert np.max(np.abs(got - want)) < bound


def test_fewer_survivors_than_the_threshold_fail_the_round_in_one_line() -> None:
    """Threshold 4 of 5 shares; two nodes drop before training: nobody can be unmasked."""
    settings = SecAggSettings(clipping_range=0.1, num_shares=5, reconstruction_threshold=4)
    vectors = _vectors(1.0)
    with pytest.raises(
        SecAggFailed,
        match=r"after training, 3 of 5 clients are left: node \d+ "
        r"has 3 live neighbours, 4 are needed \(secagg.reconstruction_threshold\)",
    ):
        _run(
            settings, {n: Client(n, v) for n, v in vectors.items()}, {44: "collect", 55: "collect"}
        )


def test_the_settings_follow_flowers_rules() -> None:
    """Shares: a fraction of the clients made odd (or all), an int as given (made odd);
    threshold: a fraction of the shares (at least 2), an int as given; Flower's checks."""
    cases = [((1.0, 0.5), 5, (5, 2)), ((0.6, 0.5), 10, (7, 4)), ((3, 2), 10, (3, 2))]
    cases.append(((4, 2), 10, (5, 2)))
    for (shares, threshold), clients, want in cases:
        settings = SecAggSettings(num_shares=shares, reconstruction_threshold=threshold)
        assert settings.shares_and_threshold(clients) == want
    with pytest.raises(ValueError, match="must be a power of 2"):
        SecAggSettings(modulus_range=(1 << 32) - 1).check()
    settings = SecAggSettings(clipping_range=1.0, quantization_range=1000, max_weight=100.0)
    assert settings.weights([10.0, 25.0]) == [0.1, 0.25]
    assert settings.average_error_bound([10.0, 25.0], 0.5) == pytest.approx(2 * 2.5 / 350)

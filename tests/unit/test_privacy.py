"""The privacy account and what `privacy=...` refuses, before anything starts."""

from __future__ import annotations

import pytest
from flwr.supercore.privacy_accounting import (
    GaussianPrivacyEvent,
    NeighboringRelation,
    PrivacyConfig,
    SamplingMethod,
)
from flwr.supercore.privacy_accounting.rdp_accountant import RdpAccountant

from fl_system.config.compose import compose_experiment
from fl_system.config.experiment import build_strategy
from fl_system.privacy import PrivacyAccount, check_privacy, unaccounted_reason
from fl_system.privacy.account import LocalAccount
from fl_system.settings.value_checks import ConfigError


def _flower_epsilons(sigma: float, sampled: int, population: int, delta: float, rounds: int):
    accountant = RdpAccountant(
        PrivacyConfig(
            target_delta=delta,
            population_size=population,
            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
            sampling_method=SamplingMethod.NO_AMPLIFICATION,
        )
    )
    out = []
    for _ in range(rounds):
        accountant.compose(GaussianPrivacyEvent(sigma, sampled, population))
        out.append(accountant.get_epsilon(delta))
    return out


@pytest.mark.parametrize(("sigma", "sampled", "population"), [(0.5, 10, 20), (2.0, 3, 3)])
def test_the_account_is_flowers_rdp_accountant_round_by_round(
    sigma: float, sampled: int, population: int
) -> None:
    account = PrivacyAccount(
        noise_multiplier=sigma, sample_size=sampled, population=population, delta=1e-5
    )
    assert account.epsilon() == 0.0  # nothing released yet
    ours = [account.release() for _ in range(5)]
    assert ours == _flower_epsilons(sigma, sampled, population, 1e-5, 5)
    assert ours == sorted(ours) and ours[0] > 0


def test_a_restored_account_continues_where_it_stopped() -> None:
    first = PrivacyAccount(noise_multiplier=1.0, sample_size=4, population=8, delta=1e-5)
    for _ in range(3):
        first.release()
    resumed = PrivacyAccount(noise_multiplier=1.0, sample_size=4, population=8, delta=1e-5)
    resumed.load_state_dict(first.state_dict())
    assert resumed.epsilon() == first.epsilon()
    assert resumed.release() == _flower_epsilons(1.0, 4, 8, 1e-5, 4)[-1]


def test_local_dp_composes_each_clients_releases_and_reports_the_most_exposed() -> None:
    """privacy=local: (epsilon, delta) per release, k releases cost k of each (basic
    composition); the figure is the client sent training most often; a restored account
    continues it."""
    account = LocalAccount(epsilon=0.5, delta=1e-6)
    assert account.spent() == (0.0, 0.0)
    assert account.release([0, 1, 2]) == (0.5, 1e-6)
    assert account.release([2, 3]) == (1.0, 2e-6)
    resumed = LocalAccount(epsilon=0.5, delta=1e-6)
    resumed.load_state_dict(account.state_dict())
    assert resumed.releases == {0: 1, 1: 1, 2: 2, 3: 1}
    assert resumed.release([0, 3]) == (1.0, 2e-6)
    assert resumed.release([2]) == (1.5, 3e-6)


REFUSED = [
    (["algorithm=scaffold", "privacy=central_fixed"], "its replies carry the change of its"),
    (["algorithm=efl", "privacy=client_fixed"], "its replies carry its Fisher diagonal"),
    (["algorithm=stem", "privacy=local"], "its replies carry its momentum d"),
    (["algorithm=taco", "train.local_steps=5", "privacy=client_fixed"], "the last global update"),
    (["algorithm=fedcat", "privacy=central_fixed"], "start from their chain's model copy"),
    (["algorithm=fedacg", "privacy=central_adaptive"], "start from the lookahead model"),
    (["algorithm=fedadam", "privacy=central_fixed"], "noise would be added after its adaptive"),
    (["algorithm=fedyogi", "privacy=client_fixed"], "bounded by the clipping norm the noise"),
    (["privacy=central_fixed", "compression.up=topk"], "compression.up=topk: clipping must see"),
    (["privacy=client_fixed", "compression.down=st"], "compression.down=st"),
    (["privacy=central_fixed", "aggregation.robust=median"], "aggregation.robust=median"),
    (["algorithm=fedgsnr", "train.local_steps=5", "privacy=local"], "gradient statistics"),
    (["privacy=client_adaptive", "privacy.accounting=true"], "fixed clipping only"),
    (["privacy=central_fixed", "privacy.clipping_norm=0"], "privacy.clipping_norm must be a"),
    (["privacy=central_fixed", "privacy.reproducible_noise=1"], "must be true or false"),
    (["algorithm=taco", "train.local_steps=5", "privacy=central_fixed"], "alpha_i and its expul"),
    (["algorithm=foolsgold", "privacy=client_fixed"], "its cosine-similarity weights from"),
]


@pytest.mark.parametrize(("overrides", "reason"), REFUSED)
def test_what_does_not_compose_is_refused_by_name(overrides: list[str], reason: str) -> None:
    cfg = compose_experiment(overrides)
    with pytest.raises(ConfigError) as refused:
        check_privacy(cfg, build_strategy(cfg))
    assert reason in str(refused.value) and "\n" not in str(refused.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["privacy=central_fixed"],
        ["algorithm=fedprox", "privacy=client_fixed"],
        ["algorithm=foolsgold", "privacy=local"],  # its weights from noised updates
        ["algorithm=feddisco", "privacy=client_adaptive"],
        ["algorithm=fedacg", "privacy=local", "aggregation.robust=median"],
        ["algorithm=fedadagrad", "privacy=local"],  # the clients' noise comes before the step
    ],
)
def test_what_composes_passes(overrides: list[str]) -> None:
    cfg = compose_experiment(overrides)
    check_privacy(cfg, build_strategy(cfg))


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        (["privacy=central_fixed"], None),
        (["algorithm=fedprox", "privacy=client_fixed"], None),
        (["algorithm=feddisco", "privacy=central_fixed"], "Disco's discrepancy-aware weights"),
        (["algorithm=fednova", "privacy=central_fixed"], "its local steps"),
        (["privacy=central_fixed", "privacy.noise_multiplier=0"], "no noise"),
        (["privacy=central_fixed", "privacy.accounting=false"], None),
    ],
)
def test_only_uniform_averages_with_noise_are_accounted(
    overrides: list[str], reason: str | None
) -> None:
    cfg = compose_experiment(overrides)
    got = unaccounted_reason(cfg, build_strategy(cfg))
    assert (got is None) if reason is None else (reason in got), got

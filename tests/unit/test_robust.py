"""Robust aggregation rules and reply screening on exact vectors."""

from __future__ import annotations

import numpy as np
import pytest

from fl_system.learning.aggregation import weighted_average
from fl_system.learning.robust import (
    CoordinateMedian,
    NormClip,
    TrimmedMean,
    WeightedMean,
    update_norm,
)
from fl_system.learning.screening import above_median

F = np.float32


def _models(*rows: list[float]) -> list[list[np.ndarray]]:
    return [[np.array(r, F)] for r in rows]


def test_update_norm_counts_float_layers_only() -> None:
    model = [np.array([3.0, 4.0], F), np.array([7], np.int64)]
    reference = [np.zeros(2, F), np.array([0], np.int64)]
    assert update_norm(model, reference) == 5.0


def test_mean_is_the_weighted_average() -> None:
    models = _models([1, 2], [3, 6])
    refs = _models([0, 0], [0, 0])
    got = WeightedMean().combine(models, refs, np.array([0.25, 0.75]))
    np.testing.assert_array_equal(got[0], weighted_average(models, [0.25, 0.75])[0])
    np.testing.assert_array_equal(got[0], np.array([2.5, 5.0], F))


def test_clip_scales_each_update_to_the_bound_then_averages() -> None:
    refs = _models([1, 1], [1, 1])
    models = _models([4, 5], [1.6, 1.8])  # updates [3, 4] (norm 5) and [0.6, 0.8] (norm 1)
    got = NormClip(max_norm=1.0).combine(models, refs, np.array([0.5, 0.5]))
    # [3, 4] -> [0.6, 0.8]: both updates are [0.6, 0.8]
    np.testing.assert_allclose(got[0], [1.6, 1.8], rtol=1e-6)


def test_clip_without_a_bound_uses_the_rounds_median_norm() -> None:
    refs = _models([0, 0], [0, 0], [0, 0])
    models = _models([0, 1], [0, 2], [0, 300])  # norms 1, 2, 300: median 2
    got = NormClip().combine(models, refs, np.full(3, 1 / 3))
    np.testing.assert_allclose(got[0], [0, (1 + 2 + 2) / 3], rtol=1e-6)


def test_median_and_trimmed_mean_per_coordinate() -> None:
    models = _models([1, 2], [3, 100], [2, -5], [2.5, 2], [0, 3])
    refs = _models(*[[0, 0]] * 5)
    weights = np.full(5, 0.2)
    np.testing.assert_array_equal(
        CoordinateMedian().combine(models, refs, weights)[0], np.array([2, 2], F)
    )
    # trim 0.2 of 5 values: one cut at each end -> mean of the middle three
    np.testing.assert_allclose(
        TrimmedMean(trim=0.2).combine(models, refs, weights)[0], [(1 + 2 + 2.5) / 3, 7 / 3]
    )


def test_a_trim_that_cuts_nothing_says_so_once(caplog: pytest.LogCaptureFixture) -> None:
    """trim 0.1 of 4 replies cuts no value: the trimmed mean is then the plain mean, which a
    scaled-up update moves as far as it likes; the log says so, once."""
    models = _models([1, 2], [3, 4], [5, 6], [1000, 1000])
    refs = _models(*[[0, 0]] * 4)
    rule = TrimmedMean(trim=0.1)
    with caplog.at_level("WARNING", logger="fl_system.learning.robust"):
        got = rule.combine(models, refs, np.full(4, 0.25))
        rule.combine(models, refs, np.full(4, 0.25))
    np.testing.assert_allclose(got[0], [1009 / 4, 1012 / 4])
    warned = [r.getMessage() for r in caplog.records]
    assert warned == [
        "aggregation.robust.trim=0.1 cuts nothing from 4 replies (a value is cut at each end "
        "once trim x replies >= 1): this round's trimmed mean is the plain mean"
    ]
    assert TrimmedMean(trim=0.25).combine(models, refs, np.full(4, 0.25))[0].tolist() == [4, 5]


def test_integer_layers_keep_the_first_models_value() -> None:
    models = [
        [np.array([1.0], F), np.array([5], np.int64)],
        [np.array([3.0], F), np.array([9], np.int64)],
    ]
    for rule in (CoordinateMedian(), TrimmedMean(trim=0.0)):
        got = rule.combine(models, models, np.array([0.5, 0.5]))
        assert got[1].dtype == np.int64 and got[1].tolist() == [5]
        assert got[0].dtype == F and got[0].tolist() == [2.0]


@pytest.mark.parametrize(
    ("rule", "arg", "value"),
    [(NormClip, "max_norm", 0), (NormClip, "max_norm", True), (TrimmedMean, "trim", 0.5)],
)
def test_bad_settings_are_named(rule, arg: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"aggregation\.robust\.{arg}"):
        rule(**{arg: value})


def test_above_median_flags_values_over_ratio_times_the_median() -> None:
    assert above_median([1.0, 2.0, 3.0, 61.0], 20) == [False, False, False, True]  # median 2.5
    assert above_median([1.0, 2.0, 3.0, 50.0], 20) == [False] * 4
    assert above_median([1.0, 1000.0], 20) == [False, False]  # two replies: no median to trust
    assert above_median([1.0, 2.0, 1000.0], None) == [False] * 3
    assert above_median([0.0, 0.0, 0.0, 1.0], 20) == [False] * 4  # most did not move: no scale

from __future__ import annotations

from fl_system.learning.seeding import derive_seed


def test_derived_seeds_are_stable_and_distinct() -> None:
    assert derive_seed(0, 1, 2) == derive_seed(0, 1, 2)
    seeds = {derive_seed(0, r, p) for r in range(1, 20) for p in range(10)}
    assert len(seeds) == 19 * 10
    assert derive_seed(0, 1, 2) != derive_seed(0, 2, 1)

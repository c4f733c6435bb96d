from __future__ import annotations

import numpy as np

from fl_system.learning.seeding import derive_seed


def test_derived_seeds_are_stable_and_distinct() -> None:
    assert derive_seed(0, 1, 2) == derive_seed(0, 1, 2)
    seeds = {derive_seed(0, r, p) for r in range(1, 20) for p in range(10)}
    assert len(seeds) == 19 * 10
    assert derive_seed(0, 1, 2) != derive_seed(0, 2, 1)


def test_seed_torch_draws_what_torch_manual_seed_draws() -> None:
    import torch

    from fl_system.learning.seeding import seed_torch

    torch.manual_seed(1234)
    expected = torch.rand(5), torch.randperm(40)
    torch.manual_seed(99)
    seed_torch(1234)
    np.testing.assert_array_equal(torch.rand(5).numpy(), expected[0].numpy())
    np.testing.assert_array_equal(torch.randperm(40).numpy(), expected[1].numpy())

"""The earlier compression_tradeoff report's figures that the new report sets beside its own:
generated 2026-11-24, as it stands at commit 1d50c89, where kept positions were packed at
ceil(log2 n) bits and each reply carried its update blob as a .npy array beside an empty
dense-tensor record. Same setting, seeds (0, 1, 2) and 200 rounds as now."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Before:
    """One row of the earlier report."""

    accuracy: str  # final accuracy, % (mean ± std over seeds 0, 1, 2)
    delta: str  # vs dense FedAvg, points
    up_mb: float  # all upstream bytes of the run, MB
    up_factor: float  # dense FedAvg's upstream bytes / these
    update_factor: float  # the same on the encoded updates alone


BEFORE_COMMIT, BEFORE_DATE = "1d50c89", "2026-11-24"
BEFORE_DENSE_UP_MB = 358.56
BEFORE = {  # (arm, q) -> its row at q = 1/25 (q = 1/50 was not run)
    ("topk", 25): Before("94.34 ± 0.48", "-1.02 ± 0.72", 23.19, 15.5, 17),
    ("st_ef", 25): Before("94.72 ± 0.26", "-0.65 ± 0.54", 9.59, 37.4, 50),
    ("st", 25): Before("92.24 ± 0.49", "-3.12 ± 0.65", 9.59, 37.4, 50),
    ("efl", 25): Before("94.75 ± 0.16", "-0.62 ± 0.43", 50.19, 7.1, 50),
}

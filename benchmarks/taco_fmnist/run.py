"""TACO on Fashion-MNIST, the paper's FMNIST column: Table V (accuracy at T, rounds and client
time to 70 %), Table II (mean alpha per group with 8 of 20 clients freeloading) and Table VIII
(freeloader detection over kappa x lambda). The study is `benchmarks.taco_reproduction` with
`dataset=fmnist` (Debian's `dataset-fashion-mnist`, or any copy `dataset=fmnist` finds), the
paper's 70 % target, client time on the virtual clock (`system=profiles`), and the arms of
issue 34 (STEM and FoolsGold can be added with --arms); reported here.

    python -m benchmarks.taco_fmnist.run [--seeds 0 1 2] [--rounds T] [--arms ...]
    python -m benchmarks.taco_fmnist.run --estimate   # one short run per arm: cost
"""

from __future__ import annotations

import sys

from benchmarks.taco_reproduction.run import main

FMNIST_ARMS = ["FedAvg", "FedProx", "SCAFFOLD", "FedACG", "FedDyn", "TACO", "TACO literal"]

if __name__ == "__main__":
    sys.exit(
        main(
            sys.argv[1:],
            study="taco_fmnist",
            dataset="fmnist",
            groups=["main", "freeloaders"],
            arms=FMNIST_ARMS,
            target=0.7,
            system="profiles",
        )
    )

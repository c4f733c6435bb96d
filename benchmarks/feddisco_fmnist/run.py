"""FedDisco on Fashion-MNIST, the first dataset of the paper's Table 1: FedAvg, FedProx and
SCAFFOLD (the paper's "FedDisco" on FMNIST is SCAFFOLD + Disco), each with and without Disco,
on NIID-2 (5 biased + 1 unbiased client); FedAvg +- Disco on NIID-1 (Dirichlet 0.5, 10
clients). The study is `benchmarks.feddisco_reproduction` run with `dataset=fmnist` (Debian's
`dataset-fashion-mnist`, or any copy `dataset=fmnist` finds), reported here.

    python -m benchmarks.feddisco_fmnist.run [--seeds 0 1 2] [--rounds R] [--local-epochs E]
    python -m benchmarks.feddisco_fmnist.run --estimate   # one short run per setting: cost
"""

from __future__ import annotations

import sys

from benchmarks.feddisco_reproduction.run import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], study="feddisco_fmnist", dataset="fmnist"))

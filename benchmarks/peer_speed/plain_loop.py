"""The yardstick: FedAvg as one process and a for loop, nothing but PyTorch.

    python -m benchmarks.peer_speed.plain_loop <exported workload> <rounds.csv>

Each sampled client trains a copy of the global weights for `local_epochs` of shuffled
mini-batches with plain SGD; the server averages the weights by examples and scores the
test set after every round. One thread (what a loop on a shared 2-core machine runs best on).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.peer_speed.workload import Loaded, RoundLog, load

EVAL_BATCH = 512  # the project's evaluation batch (evaluation.count): the same work


def train_client(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, w: Loaded,
                 generator: torch.Generator) -> None:  # fmt: skip
    opt = torch.optim.SGD(model.parameters(), lr=w.workload.lr)
    model.train()
    for _ in range(w.workload.local_epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(x), w.workload.batch_size):
            batch = order[start : start + w.workload.batch_size]
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    right = sum(
        int((model(x[i : i + EVAL_BATCH]).argmax(1) == y[i : i + EVAL_BATCH]).sum())
        for i in range(0, len(x), EVAL_BATCH)
    )
    return right / len(x)


def main(folder: Path, rounds_csv: Path) -> None:
    torch.set_num_threads(1)
    w = load(folder)
    model = torch.load(w.model_path, weights_only=False)
    clients = {p: (torch.from_numpy(x), torch.from_numpy(y)) for p, (x, y) in w.clients.items()}
    x_test, y_test = torch.from_numpy(w.x_test), torch.from_numpy(w.y_test)
    global_state = {k: v.clone() for k, v in model.state_dict().items()}
    log = RoundLog(rounds_csv)
    generator = torch.Generator()
    for rnd, cohort in enumerate(w.sampled, start=1):
        total = {k: torch.zeros_like(v, dtype=torch.float64) for k, v in global_state.items()}
        examples = 0
        for pid in cohort:
            x, y = clients[int(pid)]
            model.load_state_dict(global_state)
            generator.manual_seed(w.workload.seed * 1_000_003 + rnd * 10_007 + int(pid))
            train_client(model, x, y, w, generator)
            for k, v in model.state_dict().items():
                total[k] += v.double() * len(x)
            examples += len(x)
        global_state = {k: (v / examples).to(global_state[k].dtype) for k, v in total.items()}
        model.load_state_dict(global_state)
        log.round_done(rnd, accuracy(model, x_test, y_test))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

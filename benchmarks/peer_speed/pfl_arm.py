"""The same workload under Apple's pfl-research (run in the venv `peer_venv` makes).

    python -m benchmarks.peer_speed.pfl_arm <exported workload> <rounds.csv>

pfl's own FedAvg (`FederatedAveraging`, a central SGD of learning rate 1 on the averaged
model difference, weighted by data points), its `SimulatedBackend` on one process, its
`CentralEvaluationCallback` every round; its users drawn in the order the project sampled
them. pfl iterates a user's data in order (no reshuffling). One thread, as the loop.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from pfl.aggregate.simulate import SimulatedBackend
from pfl.aggregate.weighting import WeightByDatapoints
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
from pfl.callback.base import TrainingProcessCallback
from pfl.callback.central_evaluation import CentralEvaluationCallback
from pfl.data.dataset import Dataset
from pfl.data.federated_dataset import FederatedDataset
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
from pfl.metrics import Weighted
from pfl.model.pytorch import PyTorchModel

from benchmarks.peer_speed.workload import RoundLog, load

EVAL_BATCH = 512  # the project's evaluation batch (evaluation.count): the same work


class Classifier(torch.nn.Module):
    """The project's model with the `loss` and `metrics` pfl's PyTorchModel asks for."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def loss(self, x: torch.Tensor, y: torch.Tensor, eval: bool = False) -> torch.Tensor:
        self.eval() if eval else self.train()
        return F.cross_entropy(self(x), y.long())

    @torch.no_grad()
    def metrics(self, x: torch.Tensor, y: torch.Tensor, eval: bool = True) -> dict:
        self.eval()
        logits, y = self(x), y.long()
        n = len(y)
        return {
            "loss": Weighted(float(F.cross_entropy(logits, y, reduction="sum")), n),
            "accuracy": Weighted(float((logits.argmax(1) == y).sum()), n),
        }


class LogRounds(TrainingProcessCallback):
    """Writes each round's central accuracy to the file the harness watches."""

    def __init__(self, log: RoundLog) -> None:
        self.log = log

    def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):  # type: ignore[no-untyped-def]
        accuracy = next(
            v.overall_value for k, v in aggregate_metrics
            if "Central val" in str(k) and "accuracy" in str(k)
        )  # fmt: skip
        self.log.round_done(central_iteration + 1, float(accuracy))
        return False, aggregate_metrics.__class__()


def main(folder: Path, rounds_csv: Path) -> None:
    torch.set_num_threads(1)
    w = load(folder)
    schedule = iter(int(p) for p in w.sampled.ravel())
    users = {p: [x, y] for p, (x, y) in w.clients.items()}
    train = FederatedDataset.from_slices(users, lambda: next(schedule))
    net = Classifier(torch.load(w.model_path, weights_only=False))
    model = PyTorchModel(
        net,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0),
    )
    central = CentralEvaluationCallback(
        Dataset(raw_data=[np.asarray(w.x_test), np.asarray(w.y_test)]),
        model_eval_params=NNEvalHyperParams(local_batch_size=EVAL_BATCH),
        frequency=1,
    )
    FederatedAveraging().run(
        algorithm_params=NNAlgorithmParams(
            central_num_iterations=w.workload.num_rounds,
            evaluation_frequency=1,
            train_cohort_size=w.workload.clients_per_round,
            val_cohort_size=0,
        ),
        backend=SimulatedBackend(train, val_data=train, postprocessors=[WeightByDatapoints()]),
        model=model,
        model_train_params=NNTrainHyperParams(
            local_num_epochs=w.workload.local_epochs,
            local_learning_rate=w.workload.lr,
            local_batch_size=w.workload.batch_size,
        ),
        model_eval_params=NNEvalHyperParams(local_batch_size=EVAL_BATCH),
        callbacks=[central, LogRounds(RoundLog(rounds_csv))],
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))

"""The asynchrony study's settings and arms: the same budget of client updates for each.

phones  100 phones (system=mobile) whose compute varies widely (sigma 1.0), each online half
        the time in sessions of 5 virtual s: a synchronous round waits for its slowest client
        and loses those that go offline mid-round (the baseline visibly hurt)
equal   100 equal devices (system=profiles, no spread), always online: every client of a round
        finishes at the same instant, so a round waits for nobody

Arms: FedAvg synchronous (20 clients a round), FedAvg with a round deadline (drops who does not
finish in time; phones only: with equal devices a deadline keeps all or none), FedBuff (20 in
flight, a step every 10 updates) and FedAsync (20 in flight, a step per update). Each arm sends
the client tasks of ROUNDS synchronous rounds (20 each) and is evaluated every 40 tasks.
"""

from __future__ import annotations

import argparse

from benchmarks.harness.outcome import RunSpec

ROUNDS = 60  # synchronous FedAvg's rounds; every arm sends 20 client tasks a round's worth
PER_ROUND = 20  # clients a synchronous round, and in flight at once
EVAL_UPDATES = 40  # an evaluation every this many client tasks
COMMON = (
    "runtime=simulation",
    "dataset=mnist5k",
    "model=cnn",
    "partition=dirichlet",
    "partition.alpha=0.5",
    "num_clients=100",
    "train.local_steps=10",
    "train.batch_size=10",
    "train.lr=0.05",
    "train.momentum=0.0",
)
SETTINGS = {  # name: (title, overrides)
    "phones": (
        "phones that differ, online half the time (system=mobile, compute sigma 1.0)",
        (
            "system=mobile",
            "system.compute.sigma=1.0",
            "system.availability.fraction=0.5",
            "system.availability.mean_session=5",
        ),
    ),
    "equal": (
        "equal devices, always online (system=profiles, no spread)",
        (
            "system=profiles",
            "system.compute.sigma=0",
            "system.uplink_mbps.sigma=0",
            "system.downlink_mbps.sigma=0",
        ),
    ),
}
DEADLINE = 0.6  # virtual s: about half of a round's phones finish in time
# label: (overrides, client tasks per row, settings it runs in)
ARMS: dict[str, tuple[tuple[str, ...], int, tuple[str, ...]]] = {
    "FedAvg (sync)": (("algorithm=fedavg", "clients_per_round=20"), 20, ("phones", "equal")),
    "FedAvg, deadline": (
        ("algorithm=fedavg", "clients_per_round=20", f"system.round_deadline={DEADLINE}"),
        20,
        ("phones",),
    ),
    "FedBuff": (
        ("algorithm=fedbuff", "async.concurrency=20", "async.buffer_size=10"),
        10,
        ("phones", "equal"),
    ),
    "FedAsync": (("algorithm=fedasync", "async.concurrency=20"), 1, ("phones", "equal")),
}


def grid(args: argparse.Namespace) -> list[RunSpec]:
    specs = []
    for setting in args.settings:
        for arm, (overrides, per_row, where) in ARMS.items():
            if setting not in where:
                continue
            rows = args.rounds * PER_ROUND // per_row
            every = max(1, EVAL_UPDATES // per_row)
            for seed in args.seeds:
                specs.append(
                    RunSpec(
                        setting,
                        arm,
                        seed,
                        (
                            *COMMON,
                            *SETTINGS[setting][1],
                            *overrides,
                            f"num_rounds={rows}",
                            f"eval_every={every}",
                            f"seed={seed}",
                        ),
                        rows,
                        (("eval_every", every),),
                    )
                )
    return specs

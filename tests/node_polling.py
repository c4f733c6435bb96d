"""How often the suite's SuperNodes ask their SuperLink for work during a run.

fl-client's and fl-supernode's default (every 0.1 s while a run is active, `PollSchedule`) is
ten requests a second per node, each authenticated and answered with SQL by the SuperLink:
a third of a test federation's SuperLink CPU. The suite's federations share two cores with
each other, so their nodes poll every 0.25 s (FL_NODE_POLL_ACTIVE, the operators' own
setting): the same requests, fewer of them (a module of 13 two-round gRPC runs: 130 -> 115
CPU-s). The schedule itself is tested in tests/unit/test_polling.py.
"""

SUITE_POLLING = {"FL_NODE_POLL_ACTIVE": "0.25"}

"""What every test shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from flwr.common.constant import SUPERLINK_NODE_ID
from flwr.supercore.task_identity import TaskIdentity


@pytest.fixture(autouse=True)
def serverapp_task_identity() -> Iterator[None]:
    """Messages made in a test are made as in a ServerApp task: Flower 1.42 fills a new
    message's run, source node and task from the process's TaskIdentity, which its ServerApp
    runtime sets (and a test's process never had)."""
    saved = TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, SUPERLINK_NODE_ID, 1
    yield
    TaskIdentity._run_id, TaskIdentity._node_id, TaskIdentity._task_id = saved

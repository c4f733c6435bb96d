"""The asynchronous timeline: tasks taken in virtual finishing order, whatever order their
replies arrive in; hand-computed events."""

from __future__ import annotations

import pytest

from fl_system.heterogeneity.timeline import Task, Timeline


def test_tasks_are_due_in_finishing_order_once_no_unknown_task_could_end_first() -> None:
    """Clients 0, 1, 2 take 1, 2 and 3 virtual seconds; their replies arrive 2, 0, 1."""
    line = Timeline()
    a, b, c = (line.send(p, version=0, start=0.0, earliest=d) for p, d in ((0, 1), (1, 2), (2, 3)))
    assert [t.task_id for t in (a, b, c)] == [0, 1, 2]
    assert line.next_due() is None  # nothing arrived
    line.finished(c.task_id, 3.0)
    assert line.next_due() is None  # 0 and 1 could still end sooner
    line.finished(a.task_id, 1.0)
    assert line.next_due() == line.in_flight[0] and line.take(a.task_id).finish == 1.0
    # client 0 trains again from t = 1: its earliest end (2) ties with client 1's known end
    again = line.send(0, version=0, start=1.0, earliest=2.0)
    assert line.next_due() is None  # client 1's reply has not come
    line.finished(b.task_id, 2.0)
    assert line.next_due().task_id == b.task_id  # the tie goes to the task sent first
    line.take(b.task_id)
    assert line.next_due() is None  # client 0's second task could still end before 3
    line.finished(again.task_id, 2.5)  # its upload took 0.5
    assert line.next_due().task_id == again.task_id
    line.take(again.task_id)
    assert line.next_due().task_id == c.task_id
    line.take(c.task_id)
    assert line.next_due() is None and line.in_flight == [] and line.busy() == set()


def test_a_client_trains_one_task_at_a_time_and_times_must_add_up() -> None:
    line = Timeline()
    task = line.send(4, version=2, start=5.0, earliest=6.0)
    assert line.busy() == {4}
    with pytest.raises(ValueError, match="partition 4 is training already"):
        line.send(4, version=2, start=5.0, earliest=7.0)
    with pytest.raises(ValueError, match=r"finish \(4.0\) before it starts \(5.0\)"):
        line.send(5, version=2, start=5.0, earliest=4.0)
    with pytest.raises(ValueError, match=r"finishes at 5\.5, before its earliest 6\.0"):
        line.finished(task.task_id, 5.5)


def test_a_restored_timeline_numbers_new_tasks_after_the_stopped_runs() -> None:
    """Restored tasks come back without their finish (their replies are asked for again),
    and the next task sent is numbered after every task the stopped run sent."""
    timeline = Timeline()
    timeline.restore([Task(4, 2, 1, 3.0, 5.0, finish=6.0)], sent=7)
    assert timeline.get(4).finish is None and timeline.sent == 7
    assert timeline.send(0, 2, 3.0, 4.0).task_id == 7
    with pytest.raises(ValueError, match="only an empty timeline can be restored"):
        timeline.restore([], sent=8)
    with pytest.raises(ValueError, match="a restored task's id is not below the 4 tasks sent"):
        Timeline().restore([Task(4, 2, 1, 3.0, 5.0)], sent=4)

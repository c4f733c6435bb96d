"""How a failed round words its failures."""

from __future__ import annotations

from server_app.rounds import ClientFailure, grouped_reasons


def test_failures_alike_are_one_group_with_ids_in_order_whatever_the_arrival() -> None:
    failures = [
        ClientFailure(node_id=7, reason="partition 10: local model has NaN"),
        ClientFailure(node_id=5, reason="partition 2: local model has NaN"),
        ClientFailure(node_id=9, reason="node unavailable"),
        ClientFailure(node_id=3, reason="partition 1: update norm 9 is above the limit"),
        ClientFailure(node_id=4, reason="node unavailable"),
    ]
    assert grouped_reasons(failures) == (
        "partitions 2, 10: local model has NaN; nodes 4, 9: node unavailable; "
        "partition 1: update norm 9 is above the limit"
    )
    assert grouped_reasons(failures[::-1]).count("partitions 2, 10: local model has NaN") == 1


def test_no_failures_say_nothing() -> None:
    assert grouped_reasons([]) == ""

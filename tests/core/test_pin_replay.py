"""Loading a group from its GroupMetadata record (Kafka's ClassicGroup.fromRecord), pinned whole:
every member field, the leader the record names (or the first member when it names none of
them), the rebalance timeout of records older than v1 (-1: the session timeout stands in), and a
state timestamp of 0 kept as it is (-1 alone means none).

Written for mutation testing (issue 28, `make mutation`): each test fails on a change that the
rest of the suite let through.
"""

from __future__ import annotations

from coordinator.core.group import MemberSnapshot
from coordinator.core.messages import ErrorCode as E
from coordinator.core.records import GroupMetadataKey, GroupMetadataValue, MemberMetadata, Record
from tests.support.fakeclock import EPOCH, Harness, subscription

SUB = subscription("orders")


def member(n: int, instance: str | None, rebalance: int = 30_000) -> MemberMetadata:
    return MemberMetadata(
        f"m-{n}", instance, f"c{n}", f"/10.0.0.{n}", rebalance, 10_000, SUB, f"A{n}".encode()
    )


def loaded(value: GroupMetadataValue) -> Harness:
    h = Harness()
    h.core.replay(Record(GroupMetadataKey("g"), value))
    h.core.finish_loading(h.now)
    return h


def test_every_member_field_is_loaded_and_the_named_leader_kept() -> None:
    value = GroupMetadataValue(
        "consumer", 7, "range", "m-2", 1_000, (member(1, "i1"), member(2, None, -1))
    )
    snapshot = loaded(value).core.group("g")
    assert snapshot is not None
    assert (snapshot.state, snapshot.protocol_type, snapshot.protocol_name) == (
        "Stable",
        "consumer",
        "range",
    )
    assert (snapshot.generation_id, snapshot.leader_id) == (7, "m-2")
    assert snapshot.members == (
        MemberSnapshot("m-1", "i1", "c1", "/10.0.0.1", 10_000, 30_000, b"A1"),
        # a record before v1 has no rebalance timeout (-1): the session timeout stands in
        MemberSnapshot("m-2", None, "c2", "/10.0.0.2", 10_000, 10_000, b"A2"),
    )


def test_a_leader_that_is_not_a_member_gives_way_to_the_first_member() -> None:
    value = GroupMetadataValue(
        "consumer", 3, "range", "gone", 1_000, (member(1, None), member(2, None))
    )
    assert loaded(value).core.group("g").leader_id == "m-1"  # type: ignore[union-attr]
    no_leader = GroupMetadataValue("consumer", 3, "range", None, 1_000, (member(1, None),))
    assert loaded(no_leader).core.group("g").leader_id == "m-1"  # type: ignore[union-attr]


def test_a_loaded_static_member_answers_and_keeps_its_timestamp_of_zero() -> None:
    value = GroupMetadataValue("consumer", 5, "range", "m-1", 0, (member(1, "i1"),))
    h = loaded(value)
    assert h.heartbeat("g", "m-1", 5, "i1").error is E.none
    # replaced in Stable without a rebalance: the record written keeps the loaded timestamp, 0
    r = h.call(h.join_cmd("g", instance="i1"))
    assert r.error is E.none and r.generation_id == 5
    written = h.last_effects.records[-1].value
    assert written.current_state_timestamp_ms == 0  # type: ignore[union-attr]
    assert [(m.group_instance_id, m.assignment) for m in written.members] == [("i1", b"A1")]  # type: ignore[union-attr]


def test_a_timestamp_of_minus_one_is_none_and_replaced_by_the_clock() -> None:
    value = GroupMetadataValue("consumer", 5, "range", "m-1", -1, (member(1, "i1"),))
    h = loaded(value)
    h.call(h.join_cmd("g", instance="i1"))
    written = h.last_effects.records[-1].value
    assert written.current_state_timestamp_ms == h.now + EPOCH  # type: ignore[union-attr]

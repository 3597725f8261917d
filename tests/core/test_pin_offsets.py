"""OffsetCommit validation and the offset store, pinned where mutation testing found them loose
(issue 28, `make mutation`).

Kafka's ClassicGroup.validateOffsetCommit (docs/protocol.md §10.1): a commit skips the member
checks only when its generation is negative and the group is Empty; a generation of 0 or more, a
member id, or an instance id each make it a member commit, checked against the member list and then
the generation. Each test here fails on a change to offsets.py that the rest of the suite let
through.
"""

from __future__ import annotations

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import OffsetsDeleted, OffsetsExpired
from coordinator.core.messages import ErrorCode as E
from coordinator.core.messages import (
    FetchedGroup,
    FetchedPartition,
    FetchedTopic,
    FetchGroup,
    FetchTopic,
    OffsetFetch,
)
from coordinator.core.offsets import OffsetStore
from coordinator.core.records import OffsetCommitKey, OffsetCommitValue
from tests.support.fakeclock import Harness


def error_of(result: object) -> E:
    (topic,) = result.topics  # type: ignore[attr-defined]
    (partition,) = topic.partitions
    return partition.error  # type: ignore[no-any-return]


def test_generation_zero_to_an_empty_group_is_a_member_commit() -> None:
    """Generation 0 is not the simple-commit generation (-1): with no member id, the member
    check fails, Empty group or not."""
    h = Harness()
    assert error_of(h.commit("g", {("orders", 0): 1})) is E.none  # the simple group, Empty
    assert error_of(h.commit("g", {("orders", 0): 2}, generation=0)) is E.unknown_member_id
    assert error_of(h.commit("g", {("orders", 0): 2}, generation=3)) is E.unknown_member_id
    assert h.offset_of("g", "orders", 0) == 1


def test_a_known_member_with_generation_minus_one_is_told_illegal_generation() -> None:
    """The member id alone makes it a member commit; the member is known, so the generation is
    checked next, and -1 is not the group's."""
    h = Harness()
    ids, _, _ = h.stable_group("g", 2)
    r = h.commit("g", {("orders", 0): 1}, generation=-1, member_id=ids[1])
    assert error_of(r) is E.illegal_generation


def test_an_instance_id_alone_makes_a_member_commit_and_is_fenced() -> None:
    """No member id and generation -1, but a static member's instance id: the member check runs
    and the instance belongs to another member id, so FENCED_INSTANCE_ID, not
    UNKNOWN_MEMBER_ID."""
    h = Harness()
    rt = h.join("g", instance="i1")
    h.advance(3_000)
    member = h.reply(rt).member_id
    h.sync("g", member, h.reply(rt).generation_id, {member: b"a"}, instance="i1")
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]
    r = h.commit("g", {("orders", 0): 1}, generation=-1, instance="i1")
    assert error_of(r) is E.fenced_instance_id


def test_deleting_offsets_of_a_group_that_has_none_writes_nothing() -> None:
    """An Empty consumer group that never committed: OffsetDelete answers NONE per partition
    and writes no tombstone (there is nothing to delete)."""
    h = Harness()
    ids, _, _ = h.stable_group("g", 1)
    h.leave("g", (ids[0], None))
    records = len(h.records)
    r = h.delete_offsets("g", {"orders": (0,)})
    assert r.error is E.none
    assert [p.error for t in r.topics for p in t.partitions] == [E.none]
    assert h.records[records:] == []
    assert h.events_of(OffsetsDeleted) == []


def test_deleting_offsets_of_a_topic_the_group_never_committed_writes_nothing() -> None:
    h = Harness()
    h.commit("g", {("orders", 0): 5})
    records = len(h.records)
    r = h.delete_offsets("g", {"payments": (0,), "orders": (1,)})
    assert [p.error for t in r.topics for p in t.partitions] == [E.none, E.none]
    assert h.records[records:] == []
    r = h.delete_offsets("g", {"orders": (0,)})
    assert [rec.key for rec in h.records[records:]] == [OffsetCommitKey("g", "orders", 0)]
    assert [rec.value for rec in h.records[records:]] == [None]


def test_the_store_gets_what_was_put_and_nothing_else() -> None:
    store = OffsetStore()
    value = OffsetCommitValue(7, -1, "meta", 1_000, None)
    store.put("g", "orders", 1, value)
    assert store.get("g", "orders", 1) is value
    assert store.get("g", "orders", 0) is None
    assert store.get("g", "payments", 1) is None
    assert store.get("other", "orders", 1) is None
    assert store.delete("other", "orders", 1) is False
    assert store.delete("g", "payments", 1) is False
    assert store.delete("g", "orders", 0) is False
    assert store.delete("g", "orders", 1) is True
    assert store.get("g", "orders", 1) is None
    assert store.group_ids() == []


# -- OffsetFetch, OffsetDelete, retention: whole answers -----------------------------------------

DAY = 24 * 3600 * 1000
RETENTION = CoordinatorConfig(offsets_retention_ms=DAY, offsets_retention_check_interval_ms=60_000)


def test_a_batched_fetch_answers_each_group_by_name_with_every_field() -> None:
    h = Harness()
    h.commit("a", {("orders", 1): 10}, leader_epoch=4, metadata="m")
    result = h.call(
        OffsetFetch(
            (FetchGroup("a", (FetchTopic("orders", (1, 2)),)), FetchGroup("b", None)), False, 8
        )
    )
    assert result.groups == (
        FetchedGroup(
            "a",
            E.none,
            (
                FetchedTopic(
                    "orders",
                    (
                        FetchedPartition(1, 10, 4, "m", E.none),
                        FetchedPartition(2, -1, -1, "", E.none),
                    ),
                ),
            ),
        ),
        FetchedGroup("b", E.none, ()),
    )
    all_topics = h.fetch("a", None)
    assert all_topics == FetchedGroup(
        "a", E.none, (FetchedTopic("orders", (FetchedPartition(1, 10, 4, "m", E.none),)),)
    )
    h.core.loading = True
    assert h.fetch("a", {"orders": (1,)}) == FetchedGroup("a", E.coordinator_load_in_progress, ())


def test_offset_delete_counts_what_it_deleted_and_waits_for_loading() -> None:
    h = Harness()
    h.commit("g", {("orders", 0): 1, ("orders", 1): 2, ("payments", 0): 3})
    r = h.delete_offsets("g", {"orders": (0, 1, 3), "payments": (0,)})
    assert r.error is E.none
    assert h.events_of(OffsetsDeleted) == [OffsetsDeleted("g", 3)]
    h.core.loading = True
    assert h.delete_offsets("g", {"orders": (0,)}).error is E.coordinator_load_in_progress


def test_a_group_whose_offsets_stay_does_not_stop_the_check_of_the_next_groups() -> None:
    """The retention check visits every group: a Stable non-consumer group (offsets never
    expire while it is not Empty) and a Stable consumer group (offsets of a subscribed topic
    stay) come first, and the simple group after them still loses its offset and is deleted."""
    h = Harness(RETENTION)
    (a,), _, gen_a = h.stable_group("a", 1, session=1_800_000, protocol_type="connect")
    (c,), _, gen_c = h.stable_group("c", 1, session=1_800_000)  # reads orders
    h.commit("a", {("orders", 0): 1}, generation=gen_a, member_id=a)
    h.commit("c", {("orders", 0): 2}, generation=gen_c, member_id=c)
    h.commit("b", {("orders", 0): 3})
    for _ in range(100):
        h.advance(DAY // 96)
        h.heartbeat("a", a, gen_a)
        h.heartbeat("c", c, gen_c)
    assert h.offset_of("a", "orders", 0) == 1
    assert h.offset_of("c", "orders", 0) == 2
    assert h.offset_of("b", "orders", 0) == -1
    assert h.core.group("b") is None
    assert h.events_of(OffsetsExpired) == [OffsetsExpired("b", 1)]

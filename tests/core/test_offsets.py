"""OffsetCommit / OffsetFetch / OffsetDelete (docs/protocol.md §10.1-§10.3) and retention
(§10.4)."""

from __future__ import annotations

import pytest

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import GroupDeleted, OffsetsCommitted, OffsetsExpired
from coordinator.core.messages import ErrorCode as E
from coordinator.core.records import GroupMetadataKey, OffsetCommitKey, OffsetCommitValue
from tests.support.fakeclock import EPOCH, Harness


@pytest.fixture
def h() -> Harness:
    return Harness()


def errors(result: object) -> dict[tuple[str, int], E]:
    return {
        (t.name, p.partition): p.error
        for t in result.topics  # type: ignore[attr-defined]
        for p in t.partitions
    }


# -- OffsetCommit -----------------------------------------------------------------------------


def test_simple_commit_creates_simple_group(h: Harness) -> None:
    r = h.commit("g", {("orders", 0): 5})
    assert errors(r) == {("orders", 0): E.none}
    snap = h.core.group("g")
    assert snap is not None and snap.state == "Empty" and snap.protocol_type == ""
    assert h.offset_of("g", "orders", 0) == 5


def test_commit_writes_one_record_per_partition(h: Harness) -> None:
    h.commit(
        "g", {("orders", 0): 5, ("orders", 1): 6, ("payments", 0): 7}, leader_epoch=3, metadata="m"
    )
    assert [r.key for r in h.records] == [
        OffsetCommitKey("g", "orders", 0),
        OffsetCommitKey("g", "orders", 1),
        OffsetCommitKey("g", "payments", 0),
    ]
    assert h.records[0].value == OffsetCommitValue(5, 3, "m", EPOCH + h.now, None)
    assert h.events_of(OffsetsCommitted)[-1].partitions == 3


def test_empty_group_id_is_accepted_for_commit_and_fetch(h: Harness) -> None:
    assert errors(h.commit("", {("orders", 0): 5})) == {("orders", 0): E.none}
    assert h.offset_of("", "orders", 0) == 5


def test_unknown_topic_or_partition_is_per_partition(h: Harness) -> None:
    r = h.commit("g", {("orders", 0): 1, ("orders", 4): 1, ("nope", 0): 1})
    assert errors(r) == {
        ("orders", 0): E.none,
        ("orders", 4): E.unknown_topic_or_partition,
        ("nope", 0): E.unknown_topic_or_partition,
    }


def test_only_unknown_partitions_create_no_group(h: Harness) -> None:
    h.commit("g", {("nope", 0): 1})
    assert h.core.group("g") is None and not h.records


def test_unknown_group_with_generation_v9_is_group_id_not_found(h: Harness) -> None:
    r = h.commit("g", {("orders", 0): 1}, generation=1, member_id="m", version=9)
    assert errors(r) == {("orders", 0): E.group_id_not_found}


def test_unknown_group_with_generation_v8_is_illegal_generation(h: Harness) -> None:
    r = h.commit("g", {("orders", 0): 1}, generation=1, member_id="m", version=8)
    assert errors(r) == {("orders", 0): E.illegal_generation}


def test_group_error_on_valid_partitions_keeps_unknown_partition_error(h: Harness) -> None:
    r = h.commit("g", {("orders", 0): 1, ("nope", 0): 1}, generation=1, version=9)
    assert errors(r) == {
        ("orders", 0): E.group_id_not_found,
        ("nope", 0): E.unknown_topic_or_partition,
    }


def test_member_commit_in_stable_is_accepted(h: Harness) -> None:
    ids, _, gen = h.stable_group()
    r = h.commit("g", {("orders", 0): 9}, generation=gen, member_id=ids[0])
    assert errors(r) == {("orders", 0): E.none}


def test_commit_unknown_member(h: Harness) -> None:
    _, _, gen = h.stable_group()
    r = h.commit("g", {("orders", 0): 9}, generation=gen, member_id="ghost")
    assert errors(r) == {("orders", 0): E.unknown_member_id}


def test_commit_fenced_instance(h: Harness) -> None:
    rt = h.join("g", instance="i1")
    h.advance(3_000)
    gen = h.reply(rt).generation_id
    r = h.commit("g", {("orders", 0): 9}, generation=gen, member_id="other", instance="i1")
    assert errors(r) == {("orders", 0): E.fenced_instance_id}


def test_commit_wrong_generation_is_illegal_generation(h: Harness) -> None:
    ids, _, gen = h.stable_group()
    r = h.commit("g", {("orders", 0): 9}, generation=gen + 1, member_id=ids[0])
    assert errors(r) == {("orders", 0): E.illegal_generation}


def test_simple_commit_to_non_empty_group_is_unknown_member_id(h: Harness) -> None:
    h.stable_group()
    assert errors(h.commit("g", {("orders", 0): 9})) == {("orders", 0): E.unknown_member_id}


def test_generation_minus_one_with_member_id_validates_member(h: Harness) -> None:
    h.stable_group()
    r = h.commit("g", {("orders", 0): 9}, generation=-1, member_id="ghost")
    assert errors(r) == {("orders", 0): E.unknown_member_id}


def test_generation_minus_one_on_empty_group_ignores_member_id(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1})
    r = h.commit("g", {("orders", 0): 2}, generation=-1, member_id="whoever", instance="x")
    assert errors(r) == {("orders", 0): E.none}


def test_commit_in_completing_rebalance_is_rebalance_in_progress(h: Harness) -> None:
    rt, mid = h.join_dynamic("g")
    h.advance(3_000)
    gen = h.reply(rt).generation_id
    r = h.commit("g", {("orders", 0): 9}, generation=gen, member_id=mid)
    assert errors(r) == {("orders", 0): E.rebalance_in_progress}


def test_commit_in_preparing_rebalance_by_old_generation_is_accepted(h: Harness) -> None:
    ids, leader, gen = h.stable_group()
    h.join("g", leader)
    r = h.commit("g", {("orders", 0): 9}, generation=gen, member_id=ids[1])
    assert errors(r) == {("orders", 0): E.none}


def test_commit_resets_session_timer(h: Harness) -> None:
    ids, _, gen = h.stable_group("g", 1)
    for _ in range(4):
        h.advance(8_000)
        h.commit("g", {("orders", 0): 1}, generation=gen, member_id=ids[0])
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def test_metadata_too_large_is_per_partition(h: Harness) -> None:
    h2 = Harness(CoordinatorConfig(offset_metadata_max_bytes=4))
    r = h2.commit("g", {("orders", 0): 1}, metadata="12345")
    assert errors(r) == {("orders", 0): E.offset_metadata_too_large}
    assert h2.commit("g", {("orders", 0): 1}, metadata="1234").topics[0].partitions[0].error is (
        E.none
    )


def test_metadata_length_is_measured_in_java_chars() -> None:
    h = Harness(CoordinatorConfig(offset_metadata_max_bytes=2))
    assert errors(h.commit("g", {("orders", 0): 1}, metadata="\U0001f600")) == {
        ("orders", 0): E.none
    }  # one code point, two UTF-16 units
    assert errors(h.commit("g", {("orders", 0): 1}, metadata="a\U0001f600")) == {
        ("orders", 0): E.offset_metadata_too_large
    }


def test_null_metadata_is_stored_as_empty(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1}, metadata=None)
    assert h.fetch("g", {"orders": (0,)}).topics[0].partitions[0].metadata == ""


def test_retention_time_sets_expire_timestamp(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1}, retention=5_000, version=2)
    value = h.records[-1].value
    assert value.expire_timestamp_ms == EPOCH + h.now + 5_000  # type: ignore[union-attr]


def test_commit_while_loading(h: Harness) -> None:
    h.core.loading = True
    assert errors(h.commit("g", {("orders", 0): 1})) == {
        ("orders", 0): E.coordinator_load_in_progress
    }


# -- OffsetFetch ------------------------------------------------------------------------------


def test_fetch_unknown_group_returns_minus_one_without_error(h: Harness) -> None:
    g = h.fetch("nope", {"orders": (0, 1)})
    assert g.error is E.none
    assert [(p.offset, p.leader_epoch, p.metadata, p.error) for p in g.topics[0].partitions] == [
        (-1, -1, "", E.none)
    ] * 2


def test_fetch_all_topics_of_unknown_group_is_empty(h: Harness) -> None:
    assert h.fetch("nope", None).topics == ()


def test_fetch_all_topics(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1, ("payments", 1): 2})
    g = h.fetch("g", None)
    assert {(t.name, p.partition, p.offset) for t in g.topics for p in t.partitions} == {
        ("orders", 0, 1),
        ("payments", 1, 2),
    }


def test_fetch_require_stable_just_answers(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1})
    assert h.fetch("g", {"orders": (0,)}, stable=True).topics[0].partitions[0].offset == 1


def test_fetch_while_loading(h: Harness) -> None:
    h.core.loading = True
    assert h.fetch("g", None).error is E.coordinator_load_in_progress


# -- OffsetDelete -----------------------------------------------------------------------------


def test_delete_offsets_empty_group_id(h: Harness) -> None:
    assert h.delete_offsets("", {"orders": (0,)}).error is E.invalid_group_id


def test_delete_offsets_unknown_group(h: Harness) -> None:
    assert h.delete_offsets("g", {"orders": (0,)}).error is E.group_id_not_found


def test_delete_offsets_of_empty_group_writes_tombstones(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1, ("orders", 1): 2})
    r = h.delete_offsets("g", {"orders": (0, 3)})
    assert r.error is E.none and errors(r) == {("orders", 0): E.none, ("orders", 3): E.none}
    assert h.last_effects.records[0].key == OffsetCommitKey("g", "orders", 0)
    assert h.last_effects.records[0].value is None
    assert len(h.last_effects.records) == 1
    assert h.offset_of("g", "orders", 0) == -1 and h.offset_of("g", "orders", 1) == 2


def test_delete_offsets_unknown_partition(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1})
    r = h.delete_offsets("g", {"orders": (9,), "nope": (0,)})
    assert errors(r) == {
        ("orders", 9): E.unknown_topic_or_partition,
        ("nope", 0): E.unknown_topic_or_partition,
    }


def test_delete_offsets_non_consumer_non_empty_group(h: Harness) -> None:
    h.stable_group("g", 1, protocol_type="connect", protocols=(("v1", b""),))
    assert h.delete_offsets("g", {"orders": (0,)}).error is E.non_empty_group


def test_delete_offsets_subscribed_topic(h: Harness) -> None:
    h.stable_group("g", 1)  # subscribes to orders
    h.commit(
        "g",
        {("payments", 0): 1, ("orders", 0): 1},
        generation=1,
        member_id=h.core.group("g").members[0].member_id,
    )  # type: ignore[union-attr]
    r = h.delete_offsets("g", {"orders": (0,), "payments": (0,)})
    assert errors(r) == {("orders", 0): E.group_subscribed_to_topic, ("payments", 0): E.none}


def test_delete_offsets_unparseable_consumer_subscription_blocks_every_topic(h: Harness) -> None:
    h.stable_group("g", 1, protocols=(("range", b"\x00"),))
    r = h.delete_offsets("g", {"payments": (0,)})
    assert errors(r) == {("payments", 0): E.group_subscribed_to_topic}


# -- retention (§10.4) ------------------------------------------------------------------------

DAY = 24 * 3600 * 1000
RETENTION = CoordinatorConfig(offsets_retention_ms=DAY, offsets_retention_check_interval_ms=60_000)


def test_simple_group_offsets_expire_from_commit_time_and_group_is_deleted() -> None:
    h = Harness(RETENTION)
    h.commit("g", {("orders", 0): 1})
    h.advance(DAY - 60_000)
    assert h.offset_of("g", "orders", 0) == 1
    h.advance(60_000)
    assert h.offset_of("g", "orders", 0) == -1
    assert h.core.group("g") is None
    assert h.records[-1].key == GroupMetadataKey("g") and h.records[-1].value is None
    assert h.events_of(OffsetsExpired) and h.events_of(GroupDeleted)


def test_explicit_expire_timestamp_wins() -> None:
    h = Harness(RETENTION)
    h.commit("g", {("orders", 0): 1}, retention=120_000, version=2)
    h.advance(120_000)
    assert h.offset_of("g", "orders", 0) == -1


def test_empty_consumer_group_expires_from_when_it_became_empty() -> None:
    h = Harness(RETENTION)
    ids, _, gen = h.stable_group("g", 1)
    h.commit("g", {("payments", 0): 1}, generation=gen, member_id=ids[0])
    for _ in range(3):
        h.advance(DAY // 4)
        h.heartbeat("g", ids[0], gen)  # session 10 s: too late, it expired long ago
    snap = h.core.group("g")
    assert snap is not None and snap.state == "Empty"
    h.advance(DAY)
    assert h.core.group("g") is None


def test_stable_consumer_group_keeps_subscribed_topics_offsets() -> None:
    h = Harness(RETENTION)
    ids, _, gen = h.stable_group("g", 1, session=1_800_000)
    h.commit("g", {("orders", 0): 1, ("payments", 0): 2}, generation=gen, member_id=ids[0])
    for _ in range(80):
        h.advance(DAY // 72)
        h.heartbeat("g", ids[0], gen)
    assert h.offset_of("g", "orders", 0) == 1  # subscribed: kept
    assert h.offset_of("g", "payments", 0) == -1  # not subscribed: expired
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def test_preparing_rebalance_group_offsets_never_expire() -> None:
    h = Harness(RETENTION)
    ids, leader, gen = h.stable_group("g", 2, session=1_800_000, rebalance=3 * DAY)
    h.commit("g", {("payments", 0): 2}, generation=gen, member_id=leader)
    rt = h.join("g", leader, session=1_800_000, rebalance=3 * DAY)
    for _ in range(80):  # the follower heartbeats (27) but never rejoins
        h.advance(DAY // 72)
        h.heartbeat("g", ids[1], gen)
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    assert h.offset_of("g", "payments", 0) == 2
    assert h.reply(rt) is None


def test_empty_group_without_offsets_is_deleted_at_next_check() -> None:
    h = Harness(RETENTION)
    ids, _, _ = h.stable_group("g", 1)
    h.leave("g", (ids[0], None))
    h.advance(60_000)
    assert h.core.group("g") is None

"""Offset retention, exactly as docs/protocol.md §10.4 (Kafka's cleanupGroupMetadata), on a fake
clock.

Every `offsets_retention_check_interval_ms`, for each group:
1. the expiry condition by group kind: protocol type present and Empty -> base is when the group
   became Empty (the commit timestamp for a group loaded from a record without one); consumer
   protocol, Stable, subscriptions known -> each offset's commit timestamp; simple group -> commit
   timestamp; anything else -> nothing expires;
2. an offset is expired if it has an explicit expire timestamp and now >= it, or else if
   now - base >= offsets.retention.minutes;
3. offsets of subscribed topics never expire;
4. each expired offset gets an OffsetCommit tombstone;
5. a group left with no offsets gets a GroupMetadata tombstone if it is Empty (simple groups too).
And: replaying the records (tombstones included) gives the state after expiry; nothing comes back.
"""

from __future__ import annotations

from typing import Any

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.events import GroupDeleted, OffsetsExpired
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
)
from tests.support.fakeclock import EPOCH, Harness, subscription

MINUTE = 60_000
RETENTION_MS = 100 * MINUTE
CHECK_MS = MINUTE
CONFIG = CoordinatorConfig(
    offsets_retention_ms=RETENTION_MS,
    offsets_retention_check_interval_ms=CHECK_MS,
    initial_rebalance_delay_ms=0,
    session_timeout_max_ms=10 * RETENTION_MS,
)


def harness() -> Harness:
    h = Harness(CONFIG)
    h.advance(0)  # arm the retention timer at t = h.now
    return h


def wall(h: Harness) -> int:
    return h.now + EPOCH


def stored(h: Harness, group: str) -> dict[tuple[str, int], int]:
    return {tp: v.offset for tp, v in h.core.committed_offsets(group).items()}


def tombstones_since(h: Harness, start: int) -> list[Any]:
    return [r.key for r in h.records[start:] if r.value is None]


def replayed(h: Harness) -> GroupCoordinator:
    fresh = GroupCoordinator(h.config, h.catalog, h.new_id, EPOCH)
    for record in h.records:
        fresh.replay(record)
    fresh.finish_loading(h.now)
    return fresh


def same_after_replay(h: Harness) -> None:
    fresh = replayed(h)
    assert sorted(fresh.offset_group_ids()) == sorted(h.core.offset_group_ids())
    for gid in h.core.offset_group_ids():
        assert fresh.committed_offsets(gid) == h.core.committed_offsets(gid)
    assert {g.group_id for g in fresh.groups()} == {g.group_id for g in h.core.groups()}


def next_check_at_or_after(h: Harness, t: int) -> int:
    """The retention checks run at h0 + k * CHECK_MS; the first one at or after t."""
    return t + (-(t - h.check0) % CHECK_MS)  # type: ignore[attr-defined, no-any-return]


def start(h: Harness) -> Harness:
    h.check0 = h.now  # type: ignore[attr-defined]
    return h


def run_until(h: Harness, t: int) -> None:
    h.advance(t - h.now)


def empty_consumer_group(
    h: Harness, group: str = "g", topics: tuple[str, ...] = ("orders",), session: int = 10_000
) -> tuple[str, int]:
    """A Stable consumer group of one member subscribed to `topics` (the caller makes it Empty).
    -> (member id, generation)."""
    protocols = (("range", subscription(*topics)),)
    ids, _, gen = h.stable_group(group, 1, protocols=protocols, session=session)
    return ids[0], gen


# ---- simple groups: from each commit -------------------------------------------------------------


def test_simple_group_each_offset_expires_retention_after_its_own_commit() -> None:
    h = start(harness())
    h.commit("g", {("orders", 0): 10})
    t0 = h.now
    h.advance(30 * MINUTE)
    h.commit("g", {("orders", 1): 11})
    t1 = h.now
    first_expiry = next_check_at_or_after(h, t0 + RETENTION_MS)
    run_until(h, first_expiry - 1)
    assert stored(h, "g") == {("orders", 0): 10, ("orders", 1): 11}
    mark = len(h.records)
    run_until(h, first_expiry)
    assert stored(h, "g") == {("orders", 1): 11}
    assert tombstones_since(h, mark) == [OffsetCommitKey("g", "orders", 0)]
    assert h.core.group("g") is not None  # one offset left: not deleted
    second = next_check_at_or_after(h, t1 + RETENTION_MS)
    mark = len(h.records)
    run_until(h, second)
    assert stored(h, "g") == {}
    # The simple group never had a GroupMetadata record; it gets a tombstone all the same.
    assert tombstones_since(h, mark) == [
        OffsetCommitKey("g", "orders", 1), GroupMetadataKey("g"),
    ]  # fmt: skip
    assert h.core.group("g") is None
    assert [e.group_id for e in h.events_of(GroupDeleted)] == ["g"]
    assert sum(e.partitions for e in h.events_of(OffsetsExpired)) == 2
    same_after_replay(h)


def test_expiry_is_at_a_check_and_the_boundary_is_inclusive() -> None:
    """now - commit >= retention: a check exactly at the boundary expires the offset."""
    h = start(harness())
    h.commit("g", {("orders", 0): 1})  # committed at a check instant: boundary lands on a check
    committed_at = h.now
    assert next_check_at_or_after(h, committed_at + RETENTION_MS) == committed_at + RETENTION_MS
    run_until(h, committed_at + RETENTION_MS - 1)
    assert stored(h, "g") == {("orders", 0): 1}
    run_until(h, committed_at + RETENTION_MS)
    assert stored(h, "g") == {}


def test_a_recommit_restarts_the_clock() -> None:
    h = start(harness())
    h.commit("g", {("orders", 0): 1})
    h.advance(RETENTION_MS - 5 * MINUTE)
    h.commit("g", {("orders", 0): 2})
    h.advance(10 * MINUTE)
    assert stored(h, "g") == {("orders", 0): 2}


def test_explicit_expire_timestamp_wins_over_the_base() -> None:
    """A v2-4 commit with retention_time: expires at commit + retention_time, however long the
    broker's retention."""
    h = start(harness())
    h.commit("g", {("orders", 0): 1}, retention=5 * MINUTE, version=2)
    value = h.core.committed_offsets("g")[("orders", 0)]
    assert value.expire_timestamp_ms == wall(h) + 5 * MINUTE
    h.advance(5 * MINUTE)
    assert stored(h, "g") == {}
    assert h.core.group("g") is None


# ---- Empty consumer groups: from when the group became Empty -------------------------------------


def test_empty_group_expires_from_when_it_became_empty_not_from_the_commit() -> None:
    h = start(harness())
    member, gen = empty_consumer_group(h, session=2 * 60 * MINUTE)
    h.commit("g", {("orders", 0): 7, ("payments", 0): 8}, generation=gen, member_id=member)
    h.advance(60 * MINUTE)  # committed long before the group empties
    h.leave("g", (member, None))
    snap = h.core.group("g")
    assert snap is not None and snap.state == "Empty"
    emptied = h.now
    # retention after the commits, but not after the group became Empty: kept
    run_until(h, next_check_at_or_after(h, emptied + RETENTION_MS) - 1)
    assert stored(h, "g") == {("orders", 0): 7, ("payments", 0): 8}
    mark = len(h.records)
    run_until(h, next_check_at_or_after(h, emptied + RETENTION_MS))
    assert stored(h, "g") == {}
    assert set(tombstones_since(h, mark)) == {
        OffsetCommitKey("g", "orders", 0), OffsetCommitKey("g", "payments", 0),
        GroupMetadataKey("g"),
    }  # fmt: skip
    assert tombstones_since(h, mark)[-1] == GroupMetadataKey("g")  # the group after its offsets
    assert h.core.group("g") is None
    same_after_replay(h)


def test_offsets_committed_after_the_group_emptied_share_the_empty_base() -> None:
    """Kafka measures every offset of an Empty group from currentStateTimestamp, even one
    committed (as a simple commit) after the group became Empty."""
    h = start(harness())
    member, gen = empty_consumer_group(h)
    h.commit("g", {("orders", 0): 7}, generation=gen, member_id=member)
    h.leave("g", (member, None))
    emptied = h.now
    h.advance(50 * MINUTE)
    h.commit("g", {("audit", 0): 3})  # generation -1 is accepted while Empty
    run_until(h, next_check_at_or_after(h, emptied + RETENTION_MS) - 1)
    assert stored(h, "g") == {("orders", 0): 7, ("audit", 0): 3}
    run_until(h, next_check_at_or_after(h, emptied + RETENTION_MS))
    assert stored(h, "g") == {}
    assert h.core.group("g") is None


def test_a_rejoin_before_expiry_saves_the_offsets() -> None:
    h = start(harness())
    member, gen = empty_consumer_group(h)
    h.commit("g", {("orders", 0): 7}, generation=gen, member_id=member)
    h.leave("g", (member, None))
    h.advance(RETENTION_MS - 10 * MINUTE)
    ids, _, gen = h.stable_group("g", 1, session=3_600_000)
    for _ in range(5):  # Stable and subscribed to orders: never expires
        h.advance(RETENTION_MS // 4)
        h.heartbeat("g", ids[0], gen)
    assert stored(h, "g") == {("orders", 0): 7}
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def test_loaded_empty_group_without_state_timestamp_uses_commit_time() -> None:
    """A GroupMetadata record without currentStateTimestamp (v0/v1, or -1): base falls back to
    each offset's commit timestamp."""
    h = Harness(CONFIG)
    t = h.now + EPOCH
    h.core.replay(
        Record(GroupMetadataKey("g"), GroupMetadataValue("consumer", 3, None, None, -1, ()))
    )
    h.core.replay(Record(OffsetCommitKey("g", "orders", 0), OffsetCommitValue(1, -1, "", t, None)))
    h.core.replay(Record(OffsetCommitKey("g", "orders", 1),
                         OffsetCommitValue(2, -1, "", t + 30 * MINUTE, None)))  # fmt: skip
    h.core.finish_loading(h.now)
    start(h)
    run_until(h, next_check_at_or_after(h, h.now + RETENTION_MS))
    assert stored(h, "g") == {("orders", 1): 2}
    run_until(h, next_check_at_or_after(h, h.now + 30 * MINUTE))
    assert stored(h, "g") == {}
    assert h.core.group("g") is None


def test_loaded_empty_group_with_state_timestamp_uses_it() -> None:
    h = Harness(CONFIG)
    t = h.now + EPOCH
    emptied = t - 90 * MINUTE  # emptied 90 minutes ago; the commit is recent
    h.core.replay(Record(GroupMetadataKey("g"),
                         GroupMetadataValue("consumer", 3, None, None, emptied, ())))  # fmt: skip
    h.core.replay(Record(OffsetCommitKey("g", "orders", 0), OffsetCommitValue(1, -1, "", t, None)))
    h.core.finish_loading(h.now)
    start(h)
    run_until(h, next_check_at_or_after(h, h.now + 10 * MINUTE))
    assert stored(h, "g") == {}


# ---- non-empty groups ----------------------------------------------------------------------------


def test_stable_consumer_group_expires_only_unsubscribed_topics_from_commit_time() -> None:
    h = start(harness())
    ids, _, gen = h.stable_group("g", 1, session=3_600_000,
                                 protocols=(("range", subscription("orders")),))  # fmt: skip
    h.commit("g", {("orders", 0): 1, ("payments", 0): 2}, generation=gen, member_id=ids[0])
    committed = h.now
    for _ in range(4):  # keep the member alive past the retention
        h.advance(RETENTION_MS // 3)
        h.heartbeat("g", ids[0], gen)
        if h.now >= committed + RETENTION_MS + CHECK_MS:
            break
    assert stored(h, "g") == {("orders", 0): 1}
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]
    # All of a Stable group's expirable offsets gone: it is not Empty, so it stays.
    h.advance(RETENTION_MS // 3)
    h.heartbeat("g", ids[0], gen)
    assert h.core.group("g") is not None


def test_consumer_group_with_unknown_subscriptions_expires_nothing() -> None:
    h = start(harness())
    ids, _, gen = h.stable_group("g", 1, session=3_600_000, protocols=(("range", b"\x00"),))
    h.commit("g", {("payments", 0): 2}, generation=gen, member_id=ids[0])
    for _ in range(5):
        h.advance(RETENTION_MS // 2)
        h.heartbeat("g", ids[0], gen)
    assert stored(h, "g") == {("payments", 0): 2}


def test_non_consumer_protocol_stable_group_expires_nothing() -> None:
    h = start(harness())
    ids, _, gen = h.stable_group("g", 1, session=3_600_000, protocol_type="connect",
                                 protocols=(("default", b"whatever"),))  # fmt: skip
    h.commit("g", {("payments", 0): 2}, generation=gen, member_id=ids[0])
    for _ in range(5):
        h.advance(RETENTION_MS // 2)
        h.heartbeat("g", ids[0], gen)
    assert stored(h, "g") == {("payments", 0): 2}


def test_non_consumer_protocol_empty_group_expires_from_empty_time() -> None:
    h = start(harness())
    ids, _, gen = h.stable_group("g", 1, protocol_type="connect",
                                 protocols=(("default", b"whatever"),))  # fmt: skip
    h.commit("g", {("payments", 0): 2}, generation=gen, member_id=ids[0])
    h.leave("g", (ids[0], None))
    emptied = h.now
    run_until(h, next_check_at_or_after(h, emptied + RETENTION_MS) - 1)
    assert stored(h, "g") == {("payments", 0): 2}
    run_until(h, next_check_at_or_after(h, emptied + RETENTION_MS))
    assert stored(h, "g") == {}
    assert h.core.group("g") is None


def test_rebalancing_group_expires_nothing() -> None:
    h = start(harness())
    ids, leader, gen = h.stable_group("g", 2, session=3_600_000, rebalance=10 * RETENTION_MS)
    h.commit("g", {("payments", 0): 2}, generation=gen, member_id=leader)
    h.join("g", leader, session=3_600_000, rebalance=10 * RETENTION_MS)  # PreparingRebalance
    for _ in range(5):
        h.advance(RETENTION_MS // 2)
        h.heartbeat("g", ids[1], gen)  # keeps the other member (27: rejoin needed) alive
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    assert stored(h, "g") == {("payments", 0): 2}


# ---- groups without offsets, loading, the check timer -----------------------------------------


def test_empty_group_without_offsets_is_deleted_at_the_next_check() -> None:
    h = start(harness())
    member, _ = empty_consumer_group(h)
    h.leave("g", (member, None))
    mark = len(h.records)
    run_until(h, next_check_at_or_after(h, h.now + 1))
    assert tombstones_since(h, mark) == [GroupMetadataKey("g")]
    assert h.core.group("g") is None
    same_after_replay(h)


def test_nothing_expires_while_loading_and_the_check_starts_after_loading() -> None:
    h = Harness(CONFIG)
    old = h.now + EPOCH - 10 * RETENTION_MS
    h.core.replay(
        Record(OffsetCommitKey("g", "orders", 0), OffsetCommitValue(1, -1, "", old, None))
    )
    assert h.core.loading
    assert h.core.expire(h.now + 10 * CHECK_MS).records == []
    h.core.finish_loading(h.now)
    assert h.core.next_deadline_ms() == h.now + CHECK_MS
    h.advance(CHECK_MS - 1)
    assert stored(h, "g") == {("orders", 0): 1}
    h.advance(1)
    assert stored(h, "g") == {}


def test_restart_after_expiry_does_not_bring_offsets_back() -> None:
    """The expiry tombstones are records like any other: a core rebuilt from the log (as after a
    restart) has neither the expired offsets nor the deleted group, and expires nothing more."""
    h = start(harness())
    h.commit("gone", {("orders", 0): 1})
    h.advance(20 * MINUTE)
    h.commit("kept", {("orders", 0): 2})
    member, gen = empty_consumer_group(h, "consumers")
    h.commit("consumers", {("orders", 1): 3}, generation=gen, member_id=member)
    run_until(h, next_check_at_or_after(h, h.check0 + RETENTION_MS))  # type: ignore[attr-defined]
    assert stored(h, "gone") == {} and h.core.group("gone") is None
    assert stored(h, "kept") == {("orders", 0): 2}
    fresh = replayed(h)
    assert fresh.committed_offsets("gone") == {} and fresh.group("gone") is None
    assert {tp: v.offset for tp, v in fresh.committed_offsets("kept").items()} == {("orders", 0): 2}
    assert fresh.committed_offsets("consumers") == h.core.committed_offsets("consumers")


def test_stable_group_restored_from_a_record_keeps_subscribed_offsets() -> None:
    """After loading, a Stable consumer group's subscriptions come from its members' metadata
    (§10.5 'after loading'), so its subscribed offsets still never expire."""
    h = Harness(CONFIG)
    t = h.now + EPOCH
    member = MemberMetadata("m1", None, "c", "/h", 3_600_000, 3_600_000,
                            subscription("orders"), b"")  # fmt: skip
    value = GroupMetadataValue("consumer", 1, "range", "m1", t, (member,))
    h.core.replay(Record(GroupMetadataKey("g"), value))
    h.core.replay(Record(OffsetCommitKey("g", "orders", 0), OffsetCommitValue(1, -1, "", t, None)))
    h.core.replay(Record(OffsetCommitKey("g", "audit", 0), OffsetCommitValue(2, -1, "", t, None)))
    h.core.finish_loading(h.now)
    start(h)
    for _ in range(3):
        h.advance(RETENTION_MS // 2)
        h.heartbeat("g", "m1", 1)
    assert stored(h, "g") == {("orders", 0): 1}

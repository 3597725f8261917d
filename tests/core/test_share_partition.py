"""The share-partition delivery state (KIP-932) driven with a fake clock: Kafka's rules, one
example each (acquire, acknowledge types and errors, lock expiry, delivery limit, SPSO, caps,
aborted transactions, snapshots and updates)."""

from __future__ import annotations

from coordinator.core.messages import ErrorCode
from coordinator.core.share.partition import (
    AcknowledgeType,
    AcquiredRecords,
    AcquireMode,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    ShareUpdate,
    StateBatch,
)

ACCEPT, RELEASE, REJECT, RENEW, GAP = (
    AcknowledgeType.ACCEPT,
    AcknowledgeType.RELEASE,
    AcknowledgeType.REJECT,
    AcknowledgeType.RENEW,
    AcknowledgeType.GAP,
)
LOCK_MS = 30_000


def part(**config: int | bool) -> SharePartition:
    return SharePartition(SharePartitionConfig(**config))  # type: ignore[arg-type]


def ranges(
    p: SharePartition, member: str, batches: list[tuple[int, int]], now: int = 0, **kw: int
) -> list[tuple[int, int, int]]:
    kw.setdefault("max_records", 500)
    got = p.acquire(member, batches, now, **kw)  # type: ignore[arg-type]
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in got.records]


def test_first_fetch_acquires_the_fetched_batches_with_delivery_count_one() -> None:
    p = part()
    assert ranges(p, "m1", [(0, 4), (5, 9)]) == [(0, 9, 1)]
    assert p.record(3) == (RecordState.ACQUIRED, 1, "m1")
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (0, 9, 10)
    assert p.next_deadline() == LOCK_MS


def test_acquired_records_are_not_acquired_by_another_member() -> None:
    p = part()
    ranges(p, "m1", [(0, 9)])
    assert ranges(p, "m2", [(0, 9)]) == []
    assert ranges(p, "m2", [(0, 9), (10, 14)]) == [(10, 14, 1)]


def test_max_records_is_soft_in_batch_optimized_mode_and_exact_in_record_limit_mode() -> None:
    p = part()
    assert ranges(p, "m1", [(0, 9), (10, 19)], max_records=3) == [(0, 9, 1)]
    q = part()
    got = ranges(q, "m1", [(0, 9)], max_records=3, mode=AcquireMode.RECORD_LIMIT)
    assert got == [(0, 2, 1)]
    assert q.next_fetch_offset() == 3


def test_a_batch_larger_than_max_records_is_split_only_in_record_limit_mode() -> None:
    # Kafka 4.4 (kafka_2.13-4.4.0.jar, SharePartition.acquireNewBatchRecords / createBatches):
    # batch_optimized stops at the end of the fetched batch holding offset first+max-1, so a
    # 5,000-record batch goes whole to one member and nothing is left for a second one;
    # record_limit cuts at exactly max records and the next member gets the next part.
    whole = [(0, 4999)]
    p = part()
    assert ranges(p, "m1", whole, max_records=500) == [(0, 4999, 1)]
    assert p.next_fetch_offset() == 5000
    assert ranges(p, "m2", whole, max_records=500) == []
    q = part()
    limit = AcquireMode.RECORD_LIMIT
    assert ranges(q, "m1", whole, max_records=500, mode=limit) == [(0, 499, 1)]
    assert q.next_fetch_offset() == 500
    got = ranges(q, "m2", whole, max_records=500, mode=limit, fetch_offset=500)
    assert got == [(500, 999, 1)]
    assert q.record(999) == (RecordState.ACQUIRED, 1, "m2")
    assert q.record(1000) is None


def test_batch_size_splits_new_records_at_fetched_batch_boundaries() -> None:
    p = part()
    got = ranges(p, "m1", [(0, 4), (5, 9), (10, 14), (15, 19)], batch_size=10)
    assert got == [(0, 9, 1), (10, 19, 1)]


def test_accept_advances_the_start_offset_over_contiguous_terminal_records() -> None:
    p = part()
    ranges(p, "m1", [(0, 9)])
    out = p.acknowledge("m1", [(0, 4, [ACCEPT]), (6, 6, [REJECT])], 1)
    assert out.error == ErrorCode.none
    assert p.start_offset == 5
    assert out.update == ShareUpdate(
        snapshot_epoch=0,
        leader_epoch=0,
        start_offset=5,
        delivery_complete_count=1,
        state_batches=(StateBatch(6, 6, RecordState.ARCHIVED, 1),),
    )
    p.acknowledge("m1", [(5, 5, [ACCEPT]), (7, 9, [GAP])], 2)
    assert (p.start_offset, p.in_flight_count(), p.next_fetch_offset()) == (10, 0, 10)


def test_release_makes_records_available_again_with_a_higher_delivery_count() -> None:
    p = part()
    ranges(p, "m1", [(0, 4)])
    assert p.acknowledge("m1", [(0, 4, [RELEASE, ACCEPT, RELEASE, RELEASE, RELEASE])], 1).error == 0
    assert p.next_fetch_offset() == 0
    assert ranges(p, "m2", [(0, 4)], now=2) == [(0, 0, 2), (2, 4, 2)]


def test_acknowledge_errors_are_kafkas_and_change_nothing() -> None:
    p = part()
    ranges(p, "m1", [(0, 9)])
    before = p.snapshot()
    wrong, bad = ErrorCode.invalid_record_state, ErrorCode.invalid_request
    assert p.acknowledge("m2", [(0, 4, [ACCEPT])], 1).error == wrong  # not the owner
    assert p.acknowledge("m1", [(0, 4, [ACCEPT]), (4, 4, [ACCEPT])], 1).error == wrong  # twice
    assert p.acknowledge("m1", [(5, 12, [ACCEPT])], 1).error == bad  # past the acquired records
    assert p.acknowledge("m1", [(12, 14, [ACCEPT])], 1).error == bad
    assert p.acknowledge("m1", [(0, 4, [ACCEPT, ACCEPT])], 1).error == bad  # types' length
    assert p.acknowledge("m1", [(0, 4, [9])], 1).error == bad  # unknown type
    assert p.acknowledge("m1", [(4, 3, [ACCEPT])], 1).error == bad
    assert p.snapshot() == before and p.start_offset == 0
    p.acknowledge("m1", [(0, 0, [ACCEPT])], 1)
    assert p.acknowledge("m1", [(0, 0, [ACCEPT])], 1).error == ErrorCode.none  # below SPSO
    assert p.acknowledge("m1", [(1, 1, [ACCEPT])], 1).error == ErrorCode.none
    p.acknowledge("m1", [(2, 9, [ACCEPT])], 1)
    assert p.acknowledge("m1", [(10, 10, [ACCEPT])], 1).error == wrong  # nothing in flight


def test_lock_expiry_releases_and_the_delivery_count_limit_archives() -> None:
    p = part(delivery_count_limit=2)
    ranges(p, "m1", [(0, 0)], now=0)
    assert p.expire(LOCK_MS - 1) is None
    update = p.expire(LOCK_MS)
    assert update is not None and update.state_batches == (
        StateBatch(0, 0, RecordState.AVAILABLE, 1),
    )
    assert ranges(p, "m2", [(0, 0)], now=LOCK_MS) == [(0, 0, 2)]
    assert p.next_deadline() == 2 * LOCK_MS
    p.expire(2 * LOCK_MS)
    assert p.record(0) is None and p.start_offset == 1  # archived, SPSO moved past it


def test_renew_extends_the_lock_without_a_new_delivery() -> None:
    p = part()
    ranges(p, "m1", [(0, 1)], now=0)
    out = p.acknowledge("m1", [(0, 0, [RENEW])], 10_000)
    assert out.error == ErrorCode.none and out.update is None
    p.expire(LOCK_MS)
    assert p.record(0) == (RecordState.ACQUIRED, 1, "m1")
    assert p.record(1) == (RecordState.AVAILABLE, 1, "")
    assert p.next_deadline() == 10_000 + LOCK_MS
    q = part(renew_enabled=False)
    ranges(q, "m1", [(0, 1)])
    assert q.acknowledge("m1", [(0, 0, [RENEW])], 1).error == ErrorCode.invalid_record_state


def test_a_member_leaving_releases_only_its_records() -> None:
    p = part()
    ranges(p, "m1", [(0, 4)])
    ranges(p, "m2", [(0, 4), (5, 9)])
    p.release_member("m1")
    assert p.acquired_by("m1") == [] and p.acquired_by("m2") == [5, 6, 7, 8, 9]
    assert p.next_fetch_offset() == 0


def test_in_flight_cap_stops_new_records_but_allows_redelivery() -> None:
    p = part(max_record_locks=10)
    ranges(p, "m1", [(0, 7)])
    assert ranges(p, "m1", [(8, 15)]) == [(8, 15, 1)]  # soft: the fetched batch is whole
    assert not p.can_acquire()
    assert ranges(p, "m2", [(16, 20)]) == []
    p.acknowledge("m1", [(3, 3, [RELEASE])], 1)
    assert p.can_acquire() and p.next_fetch_offset() == 3
    assert ranges(p, "m2", [(0, 20)], fetch_offset=3) == [(3, 3, 2)]


def test_aborted_transaction_records_are_archived_not_delivered() -> None:
    p = part()
    got = p.acquire("m1", [(0, 9)], 0, max_records=100, aborted=[(3, 5)])
    assert [(r.first_offset, r.last_offset) for r in got.records] == [(0, 2), (6, 9)]
    assert got.update is not None
    assert got.update.state_batches == (StateBatch(3, 5, RecordState.ARCHIVED, 1),)
    p.acknowledge("m1", [(0, 2, [ACCEPT])], 1)
    assert p.start_offset == 6


def test_last_delivery_goes_alone_and_near_limit_records_are_throttled() -> None:
    p = part(delivery_count_limit=4)
    ranges(p, "m1", [(0, 9)])
    for n in range(2):
        p.acknowledge("m1", [(0, 9, [RELEASE])], n)
        assert ranges(p, "m1", [(0, 9)]) != []
    p.acknowledge("m1", [(0, 9, [RELEASE])], 5)
    # Delivery count 3 = limit - 1: the last attempt, one record at a time.
    assert ranges(p, "m1", [(0, 9)]) == [(0, 0, 4)]
    assert ranges(p, "m1", [(0, 9)]) == [(1, 1, 4)]


def test_fetch_past_a_hole_archives_it_and_the_start_offset_follows_the_log() -> None:
    p = part()
    assert ranges(p, "m1", [(5, 9)]) == [(5, 9, 1)]
    assert p.start_offset == 5  # nothing was in flight: the log starts at 5
    assert ranges(p, "m1", [(12, 14)]) == [(12, 14, 1)]
    assert p.record(10) == (RecordState.ARCHIVED, 0, "")
    p.acknowledge("m1", [(5, 9, [ACCEPT])], 1)
    assert p.start_offset == 12


def test_log_start_moving_archives_available_records_below_it() -> None:
    p = part()
    ranges(p, "m1", [(0, 9)])
    p.acknowledge("m1", [(0, 5, [RELEASE])], 1)
    update = p.advance_start_offset(4)
    assert update is not None and update.start_offset == 4 and p.start_offset == 4
    p.release_member("m1")
    assert p.start_offset == 4 and p.next_fetch_offset() == 4
    assert p.advance_start_offset(20) is not None and p.start_offset == 20
    assert ranges(p, "m1", [(20, 21)]) == [(20, 21, 1)]


def test_snapshot_and_updates_rebuild_the_persisted_state() -> None:
    config = SharePartitionConfig()
    p = SharePartition(config)
    base = p.take_snapshot()
    updates = []
    ranges(p, "m1", [(0, 9)])
    for u in (
        p.acknowledge("m1", [(0, 2, [ACCEPT]), (4, 4, [REJECT]), (5, 6, [RELEASE])], 1).update,
        p.expire(LOCK_MS + 5),
    ):
        assert u is not None
        updates.append(u)
    rebuilt = SharePartition.from_snapshot(base, config)
    assert all(rebuilt.apply_update(u) for u in updates)
    assert rebuilt.snapshot() == p.snapshot()
    assert p.snapshot().state_batches == (
        StateBatch(3, 3, RecordState.AVAILABLE, 1),
        StateBatch(4, 4, RecordState.ARCHIVED, 1),
        StateBatch(5, 9, RecordState.AVAILABLE, 1),
    )
    again = SharePartition.from_snapshot(p.take_snapshot(), config)
    assert again.snapshot() == p.snapshot()
    assert not again.apply_update(updates[0])  # an update of an older snapshot is ignored
    assert ranges(again, "m2", [(0, 9)]) == [(3, 3, 2), (5, 9, 2)]


def test_acquired_records_persist_as_their_previous_state() -> None:
    p = part()
    ranges(p, "m1", [(0, 4)])
    assert p.snapshot().state_batches == ()
    p.acknowledge("m1", [(0, 4, [RELEASE])], 1)
    ranges(p, "m1", [(0, 4)])
    assert p.snapshot().state_batches == (StateBatch(0, 4, RecordState.AVAILABLE, 1),)
    assert p.acquire("m2", [(0, 4)], 2, max_records=5).records == ()
    p.release_member("m1")
    assert p.acquire("m2", [(0, 4)], 3, max_records=5).records == (AcquiredRecords(0, 4, 3),)

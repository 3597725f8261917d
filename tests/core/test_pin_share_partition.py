"""The share partition's delivery state (KIP-932, Kafka 4.4's SharePartition), pinned where
mutation testing found it loose (issue 36, `make mutation`): the edges of canAcquireRecords,
the log start moving past in-flight records, and the replay of updates (the SPSO never moves
back, and the updates since the snapshot are counted). Fake clock, no server: each test fails on
a change that the rest of the fast suite let through.
"""

from __future__ import annotations

from coordinator.core.share.partition import (
    AcknowledgeType,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    ShareUpdate,
    StateBatch,
)

RELEASE = AcknowledgeType.RELEASE
ACQUIRED, AVAILABLE, ARCHIVED = RecordState.ACQUIRED, RecordState.AVAILABLE, RecordState.ARCHIVED


def part(**config: int | bool) -> SharePartition:
    return SharePartition(SharePartitionConfig(**config))  # type: ignore[arg-type]


def test_can_acquire_at_exactly_the_cap_only_if_a_record_is_available() -> None:
    # canAcquireRecords: the next fetch offset is inside the in-flight window (something is
    # AVAILABLE), or the in-flight count is below group.share.partition.max.record.locks.
    p = part(max_record_locks=10)
    p.acquire("m1", [(0, 9)], 0, max_records=10)
    assert p.in_flight_count() == 10 and not p.can_acquire()
    p.acknowledge("m1", [(9, 9, [RELEASE])], 1)  # the last in-flight offset, AVAILABLE again
    assert p.next_fetch_offset() == 9 and p.can_acquire()
    q = part(max_record_locks=10)
    q.acquire("m1", [(0, 8)], 0, max_records=10)
    assert q.in_flight_count() == 9 and q.can_acquire()


def test_the_log_start_archives_available_records_and_leaves_acquired_ones_to_the_member() -> None:
    p = part()
    p.acquire("m1", [(0, 9)], 0, max_records=10)
    p.acknowledge("m1", [(2, 7, [RELEASE])], 1)
    update = p.advance_start_offset(8)
    assert update is not None and update.start_offset == 8
    assert [p.record(o) for o in (0, 1)] == [(ACQUIRED, 1, "m1")] * 2
    assert [p.record(o) for o in range(2, 8)] == [(ARCHIVED, 1, "")] * 6
    assert p.acquired_by("m1") == [0, 1, 8, 9]
    assert p.advance_start_offset(8) is None  # not past the start: nothing to do
    # Records still acquired below the start are archived when released (and then forgotten).
    p.release_member("m1")
    assert p.record(0) is None and p.record(8) == (AVAILABLE, 1, "")


def test_the_log_start_past_every_record_in_flight_is_where_the_next_fetch_starts() -> None:
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    p.acknowledge("m1", [(0, 4, [RELEASE])], 1)
    p.advance_start_offset(20)
    assert (p.start_offset, p.end_offset, p.next_fetch_offset()) == (20, 19, 20)
    assert p.in_flight_count() == 0 and p.can_acquire()


def test_replay_never_moves_the_start_back_and_counts_the_updates_since_the_snapshot() -> None:
    p = part()
    base = p.take_snapshot()
    rebuilt = SharePartition.from_snapshot(base, p.config)
    forward = ShareUpdate(base.snapshot_epoch, 0, 20, 0, ())
    assert rebuilt.apply_update(forward)
    assert (rebuilt.start_offset, rebuilt.next_fetch_offset(), rebuilt.in_flight_count()) == (
        20, 20, 0)  # fmt: skip
    backward = ShareUpdate(base.snapshot_epoch, 0, 3, 0, (StateBatch(25, 25, ARCHIVED, 1),))
    assert rebuilt.apply_update(backward)
    assert rebuilt.start_offset == 20 and rebuilt.record(25) == (ARCHIVED, 1, "")
    assert rebuilt.snapshot_due(2) and not rebuilt.snapshot_due(3)


def test_no_deadline_once_every_lock_is_released_or_acknowledged() -> None:
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    p.acquire("m2", [(5, 9)], 100, max_records=10)
    p.acknowledge("m1", [(0, 4, [AcknowledgeType.ACCEPT])], 1)
    assert p.next_deadline() == 100 + 30_000  # m1's lock, held by nothing, is skipped
    p.release_member("m2")
    assert p.next_deadline() is None


def test_an_expiry_after_every_record_was_acknowledged_releases_nothing() -> None:
    base = 5_000_000_000_000  # offsets far from 0: the work is per record in the lock
    p = SharePartition(SharePartitionConfig(), base)
    p.acquire("m1", [(base, base + 4)], 0, max_records=10)
    p.acknowledge("m1", [(base, base + 4, [AcknowledgeType.ACCEPT])], 1)
    assert p.expire(30_000) is None and p.expired_locks == 0
    p.acquire("m1", [(base + 5, base + 6)], 0, max_records=10)
    update = p.expire(30_000)
    assert update is not None and p.expired_locks == 1
    assert update.state_batches == (StateBatch(base + 5, base + 6, AVAILABLE, 1),)

"""The share partition's delivery state (KIP-932, Kafka 4.4's SharePartition), pinned where
mutation testing found it loose (issue 36, `make mutation`): the edges of canAcquireRecords,
the log start moving past in-flight records, and the replay of updates (the SPSO never moves
back, and the updates since the snapshot are counted). Fake clock, no server: each test fails on
a change that the rest of the fast suite let through.
"""

from __future__ import annotations

from coordinator.core.messages import ErrorCode
from coordinator.core.share.partition import (
    Acknowledged,
    AcknowledgeType,
    Acquired,
    AcquireMode,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    ShareSnapshot,
    ShareUpdate,
    StateBatch,
)

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT
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


def ranges_of(got: Acquired) -> list[tuple[int, int, int]]:
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in got.records]


def test_nothing_is_acquired_for_no_records_or_records_below_the_start() -> None:
    p = part()
    assert p.acquire("m1", [], 0, max_records=10) == Acquired((), 0, None)
    assert p.acquire("m1", [(0, 4)], 0, max_records=0) == Acquired((), 0, None)
    assert p.record(0) is None
    p.advance_start_offset(10)
    assert p.acquire("m1", [(0, 9)], 0, max_records=10) == Acquired((), 0, None)


def test_cached_records_first_then_new_ones_up_to_max_records() -> None:
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    p.acknowledge("m1", [(0, 1, [RELEASE])], 1)
    got = p.acquire("m2", [(0, 9)], 2, max_records=4, mode=AcquireMode.RECORD_LIMIT)
    assert (ranges_of(got), got.count) == ([(0, 1, 2), (5, 6, 1)], 4)
    # Exactly max_records cached: no new record, not even the rest of a fetched batch.
    q = part()
    q.acquire("m1", [(0, 4)], 0, max_records=10)
    q.acknowledge("m1", [(0, 1, [RELEASE])], 1)
    got = q.acquire("m2", [(0, 9)], 2, max_records=2)
    assert (ranges_of(got), got.count, q.end_offset) == ([(0, 1, 2)], 2, 4)


def test_at_the_cap_a_fetch_inside_the_window_redelivers_what_is_available() -> None:
    p = part(max_record_locks=10)
    p.acquire("m1", [(0, 9)], 0, max_records=10)
    p.acknowledge("m1", [(5, 9, [RELEASE])], 1)
    got = p.acquire("m2", [(0, 19)], 2, max_records=100, fetch_offset=5)
    assert ranges_of(got) == [(5, 9, 2)]
    q = part(max_record_locks=10)
    q.acquire("m1", [(0, 9)], 0, max_records=10)
    q.acknowledge("m1", [(9, 9, [RELEASE])], 1)  # the last in-flight offset
    assert ranges_of(q.acquire("m2", [(0, 19)], 2, max_records=100, fetch_offset=9)) == [
        (9, 9, 2)]
    assert q.acquire("m2", [(10, 19)], 2, max_records=100, fetch_offset=10) == Acquired(
        (), 0, None)


def test_records_missing_between_the_fetch_offset_and_the_first_batch_are_archived() -> None:
    # maybeArchiveStaleBatches: compaction removed them upstream.
    p = part()
    p.acquire("m1", [(0, 9)], 0, max_records=10)
    p.acknowledge("m1", [(0, 9, [RELEASE])], 1)
    got = p.acquire("m2", [(5, 9)], 2, max_records=100, fetch_offset=0)
    assert ranges_of(got) == [(5, 9, 2)] and p.start_offset == 5
    assert got.update is not None and got.update.start_offset == 5


def test_a_fetch_past_one_record_in_flight_keeps_it() -> None:
    p = part()
    p.acquire("m1", [(0, 0)], 0, max_records=10)
    assert ranges_of(p.acquire("m2", [(5, 9)], 0, max_records=10)) == [(5, 9, 1)]
    assert p.start_offset == 0 and p.record(0) == (ACQUIRED, 1, "m1")
    assert p.record(2) == (ARCHIVED, 0, "")


def test_records_at_half_the_delivery_limit_are_delivered_half_as_many() -> None:
    # An odd limit: records delivered ceil(5 / 2) = 3 times already come half as many.
    p = part(delivery_count_limit=5)
    for n in range(3):
        p.acquire("m1", [(0, 9)], n, max_records=10)
        p.acknowledge("m1", [(0, 9, [RELEASE])], n)
    assert ranges_of(p.acquire("m1", [(0, 9)], 5, max_records=10)) == [(0, 4, 4)]


def test_batch_optimized_mode_ends_at_the_batch_holding_the_last_wanted_offset() -> None:
    p = part()
    # max_records 6: offset 5 is the first of the second batch, taken whole.
    assert ranges_of(p.acquire("m1", [(0, 4), (5, 9), (10, 14)], 0, max_records=6)) == [
        (0, 9, 1)]


def test_acknowledge_refusals_say_why() -> None:
    p = part()
    wrong, bad = ErrorCode.invalid_record_state, ErrorCode.invalid_request
    assert p.acknowledge("m1", [(0, 0, [ACCEPT])], 0) == Acknowledged(
        wrong, None, "Batch record not found.")
    p.acquire("m1", [(5, 9)], 0, max_records=10)
    cases = [
        ([(7, 6, [ACCEPT])], bad, "Invalid acknowledgement batch."),
        ([(5, 6, [])], bad, "Invalid acknowledgement batch."),
        ([(5, 7, [ACCEPT, ACCEPT])], bad, "Invalid acknowledgement batch."),
        ([(5, 6, [1, 7])], bad, "Invalid acknowledge type: [1, 7]"),
        ([(10, 12, [ACCEPT])], bad, "The first offset in request is past acquired records."),
        ([(8, 12, [ACCEPT])], bad, "The last offset in request is past acquired records."),
        ([(5, 5, [ACCEPT]), (5, 5, [ACCEPT])], wrong, "The offset is not acquired."),
    ]
    for batches, error, message in cases:
        assert p.acknowledge("m1", batches, 1) == Acknowledged(
            error, None, message), batches
    assert p.acknowledge("m2", [(5, 5, [ACCEPT])], 1) == Acknowledged(
        wrong, None, "Member is not the owner of offset.")
    # One type per offset, the batch starting anywhere.
    assert p.acknowledge("m1", [(6, 8, [ACCEPT, REJECT, ACCEPT])], 1).error == ErrorCode.none
    assert [p.record(o) for o in (6, 7, 8)] == [(RecordState.ACKNOWLEDGED, 1, ""),
                                               (ARCHIVED, 1, ""), (RecordState.ACKNOWLEDGED, 1, "")]


def test_a_renewed_lock_expires_at_its_new_deadline() -> None:
    p = part()
    p.acquire("m1", [(0, 1)], 0, max_records=10)
    p.acknowledge("m1", [(1, 1, [AcknowledgeType.RENEW])], 10_000)
    p.expire(30_000)
    assert p.record(0) == (AVAILABLE, 1, "") and p.record(1) == (ACQUIRED, 1, "m1")
    update = p.expire(40_000)
    assert update is not None and p.record(1) == (AVAILABLE, 1, "")


def test_snapshots_count_their_epochs_and_done_records_and_skip_undelivered_ones() -> None:
    p = part()
    assert [p.take_snapshot().snapshot_epoch for _ in range(2)] == [1, 2]
    loaded = SharePartition.from_snapshot(ShareSnapshot(2, 0, 0, 10, 4, (
        StateBatch(10, 11, RecordState.ACKNOWLEDGED, 1),
        StateBatch(14, 15, ARCHIVED, 2),
        StateBatch(16, 16, AVAILABLE, 1))), SharePartitionConfig())  # fmt: skip
    # 12 and 13 were never delivered: left out, the batches after them kept.
    assert loaded.snapshot() == ShareSnapshot(2, 0, 0, 12, 2, (
        StateBatch(14, 15, ARCHIVED, 2), StateBatch(16, 16, AVAILABLE, 1)))  # fmt: skip


def test_a_fetch_that_stops_early_on_redelivery_takes_no_new_records() -> None:
    # Every reason _acquire_cached stops (max records, a last delivery alone, a throttled
    # record, a record on its last delivery) ends the fetch there: no record past SPEO.
    def redelivering(limit: int, deliveries: int) -> SharePartition:
        p = part(delivery_count_limit=limit)
        for n in range(deliveries):
            p.acquire("m1", [(0, 3)], n, max_records=10)
            p.acknowledge("m1", [(0, 3, [RELEASE])], n)
        return p

    p = redelivering(5, 1)  # max records reached on cached records
    assert ranges_of(p.acquire("m1", [(0, 9)], 9, max_records=2)) == [(0, 1, 2)]
    p = redelivering(4, 3)  # delivery count 3 = limit - 1: the last one, alone
    assert ranges_of(p.acquire("m1", [(0, 9)], 9, max_records=10)) == [(0, 0, 4)]
    assert ranges_of(p.acquire("m1", [(0, 9)], 9, max_records=10)) == [(1, 1, 4)]
    p = redelivering(10, 5)  # throttled from ceil(10 / 2) = 5 deliveries: half of 10
    assert ranges_of(p.acquire("m1", [(0, 9)], 9, max_records=4)) == [(0, 1, 6)]
    # Nothing stopping it: the cached records, then new ones.
    q = redelivering(4, 1)
    assert ranges_of(q.acquire("m1", [(0, 9)], 9, max_records=10)) == [(0, 3, 2), (4, 9, 1)]


def test_renewal_refused_says_why() -> None:
    p = part(renew_enabled=False)
    p.acquire("m1", [(0, 0)], 0, max_records=1)
    assert p.acknowledge("m1", [(0, 0, [AcknowledgeType.RENEW])], 1) == Acknowledged(
        ErrorCode.invalid_record_state, None, "Renewing acquisition locks is not enabled.")


def test_an_update_names_the_start_only_when_it_moved_and_keeps_undelivered_records() -> None:
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    update = p.acknowledge("m1", [(2, 2, [ACCEPT])], 1).update
    assert update == ShareUpdate(0, 0, -1, 1, (StateBatch(2, 2, RecordState.ACKNOWLEDGED, 1),))
    # Records archived in a hole upstream were never delivered: the update still carries them.
    q = part()
    q.acquire("m1", [(0, 0)], 0, max_records=10)
    got = q.acquire("m1", [(3, 3)], 0, max_records=10)
    assert got.update is not None and got.update.state_batches == (StateBatch(1, 2, ARCHIVED, 0),)


def test_the_last_delivery_rules_need_a_limit_above_two() -> None:
    # Limit 2: the second delivery is the last, but records still come together.
    p = part(delivery_count_limit=2)
    p.acquire("m1", [(0, 3)], 0, max_records=10)
    p.acknowledge("m1", [(0, 3, [RELEASE])], 0)
    assert ranges_of(p.acquire("m1", [(0, 3)], 0, max_records=10)) == [(0, 3, 2)]
    # Limit 3: a record on its last delivery goes alone, even before one delivered less.
    q = part(delivery_count_limit=3)
    q.acquire("m1", [(0, 1)], 0, max_records=10)
    q.acknowledge("m1", [(0, 0, [RELEASE])], 0)
    q.acquire("m1", [(0, 1)], 0, max_records=10)  # 0 again (count 2); 1 still held
    q.acknowledge("m1", [(0, 1, [RELEASE])], 0)
    assert [q.record(o) for o in (0, 1)] == [(AVAILABLE, 2, ""), (AVAILABLE, 1, "")]
    assert ranges_of(q.acquire("m1", [(0, 1)], 0, max_records=10)) == [(0, 0, 3)]


def test_a_throttled_fetch_takes_at_least_one_record() -> None:
    p = part(delivery_count_limit=10)
    for n in range(5):
        p.acquire("m1", [(0, 9)], n, max_records=10)
        p.acknowledge("m1", [(0, 9, [RELEASE])], n)
    assert ranges_of(p.acquire("m1", [(0, 9)], 9, max_records=2)) == [(0, 0, 6)]


def test_record_limit_cuts_one_over_and_batch_size_splits_at_a_batch_boundary() -> None:
    p = part()
    got = p.acquire("m1", [(0, 3)], 0, max_records=3, mode=AcquireMode.RECORD_LIMIT)
    assert ranges_of(got) == [(0, 2, 1)]
    q = part()
    batches = [(0, 9), (10, 10), (11, 20)]
    got = q.acquire("m1", batches, 0, max_records=11, batch_size=10)
    assert ranges_of(got) == [(0, 9, 1), (10, 10, 1)] and q.end_offset == 10


def test_aborted_records_are_dropped_only_from_what_this_fetch_acquired() -> None:
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    p.acknowledge("m1", [(0, 1, [RELEASE])], 0)
    got = p.acquire("m2", [(0, 9)], 0, max_records=10, aborted=[(0, 0), (2, 2), (7, 7)])
    assert ranges_of(got) == [(1, 1, 2), (5, 6, 1), (8, 9, 1)]
    assert p.acquired_by("m1") == [2, 3, 4] and p.start_offset == 1


def test_renewing_every_record_of_a_lock_moves_the_deadline() -> None:
    p = part()
    p.acquire("m1", [(0, 1)], 0, max_records=10)
    p.acknowledge("m1", [(0, 1, [AcknowledgeType.RENEW])], 10_000)
    assert p.next_deadline() == 40_000


def test_records_below_the_start_are_forgotten_once_done() -> None:
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    p.acknowledge("m1", [(0, 4, [ACCEPT])], 1)
    assert p.start_offset == 5 and [p.record(o) for o in range(5)] == [None] * 5


def test_a_record_due_its_last_delivery_or_throttled_ends_a_fetch_after_others() -> None:
    def counts(limit: int, second: int) -> SharePartition:
        """Offset 0 delivered once, offset 1 `second` times, both AVAILABLE, SPEO 1."""
        p = part(delivery_count_limit=limit)
        p.acquire("m1", [(0, 1)], 0, max_records=10)
        for n in range(second - 1):
            p.acknowledge("m1", [(1, 1, [RELEASE])], n)
            p.acquire("m1", [(0, 1)], n, max_records=10, fetch_offset=1)
        p.acknowledge("m1", [(0, 1, [RELEASE])], 0)
        assert [p.record(o) for o in (0, 1)] == [(AVAILABLE, 1, ""), (AVAILABLE, second, "")]
        return p

    p = counts(4, 3)  # offset 1 is due its last delivery: it goes alone, in the next fetch
    assert ranges_of(p.acquire("m1", [(0, 9)], 9, max_records=10)) == [(0, 0, 2)]
    assert p.end_offset == 1
    p = counts(10, 5)  # offset 1 is throttled: it starts the next fetch
    assert ranges_of(p.acquire("m1", [(0, 9)], 9, max_records=10)) == [(0, 0, 2)]
    assert p.end_offset == 1


def test_max_records_zero_changes_nothing_and_a_window_exactly_used_up_takes_no_new() -> None:
    p = part()
    p.acquire("m1", [(0, 9)], 0, max_records=10)
    p.acknowledge("m1", [(0, 9, [RELEASE])], 0)
    assert p.acquire("m2", [(5, 9)], 0, max_records=0, fetch_offset=0) == Acquired((), 0, None)
    assert p.start_offset == 0
    q = part()
    q.acquire("m1", [(0, 1)], 0, max_records=10)
    q.acknowledge("m1", [(0, 1, [RELEASE])], 0)
    assert ranges_of(q.acquire("m1", [(0, 9)], 0, max_records=2)) == [(0, 1, 2)]
    assert q.end_offset == 1


def test_an_update_replayed_over_records_acquired_together_keeps_the_rest_acquired() -> None:
    # Records acquired together are held as one run (core.share.inflight); replaying an update
    # over part of it turns the run into per-offset records first, so the rest stay ACQUIRED.
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    assert p.apply_update(ShareUpdate(p.snapshot_epoch, 0, -1, 0, (StateBatch(2, 2, ARCHIVED, 1),)))
    assert [p.record(o) for o in range(5)] == [(ACQUIRED, 1, "m1")] * 2 + [(ARCHIVED, 1, "")] + [
        (ACQUIRED, 1, "m1")] * 2  # fmt: skip
    assert p.acquired_by("m1") == [0, 1, 3, 4]


def test_records_acquired_together_are_the_members_until_the_lock_of_the_rest_expires() -> None:
    # acquired_by answers a run's offsets too; acknowledging one record of a lock leaves the
    # lock live for the others, which its expiry still releases.
    p = part(record_lock_duration_ms=1000)
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    assert p.acquired_by("m1") == [0, 1, 2, 3, 4] and p.acquired_by("m2") == []
    p.acknowledge("m1", [(0, 0, [ACCEPT])], 10)
    assert p.next_deadline() == 1000
    p.expire(1000)
    assert [p.record(o) for o in range(1, 5)] == [(AVAILABLE, 1, "")] * 4


def test_whole_runs_accepted_by_their_owner_past_the_start_or_together() -> None:
    # Records acquired by one acquire are one run (core.share.inflight.accept takes an ACCEPT of
    # whole runs at once): a run past the start becomes ACKNOWLEDGED records (one delivery, no
    # owner) and goes in the update; runs accepted together from the start move the start past.
    ACKED = RecordState.ACKNOWLEDGED
    p = part(record_lock_duration_ms=1000)
    p.acquire("m1", [(0, 4)], 0, max_records=5)
    p.acquire("m1", [(5, 9)], 0, max_records=5, fetch_offset=5)
    done = p.acknowledge("m1", [(5, 9, [ACCEPT])], 1)
    assert done.error == ErrorCode.none and done.update is not None
    assert done.update.state_batches == (StateBatch(5, 9, ACKED, 1),)
    assert [p.record(o) for o in range(5, 10)] == [(ACKED, 1, "")] * 5
    assert (p.start_offset, p.acquired_by("m1")) == (0, [0, 1, 2, 3, 4])
    # Runs 0-4, 5-6, 7-9, 10-14: the first and third accepted in one request leave the second
    # acquired; the second then accepted as two adjacent batches moves the start past all three.
    q = part(record_lock_duration_ms=1000)
    for first, last in [(0, 4), (5, 6), (7, 9), (10, 14)]:
        q.acquire("m1", [(first, last)], 0, max_records=last - first + 1, fetch_offset=first)
    assert q.acknowledge("m1", [(7, 9, [ACCEPT]), (0, 4, [ACCEPT])], 1).error == ErrorCode.none
    # (record and acquired_by turn runs into records: read them only at the end)
    assert (q.start_offset, q.delivery_complete_count()) == (5, 3)
    assert q.acknowledge("m1", [(5, 5, [ACCEPT]), (6, 6, [ACCEPT])], 1).error == ErrorCode.none
    assert (q.start_offset, q.acquired_by("m1"), q.in_flight_count()) == (
        10, [10, 11, 12, 13, 14], 5)  # fmt: skip
    # One type per offset over a whole run is not a whole-run ACCEPT: each offset its own type
    # (offset 0 stays acquired, so the start stays and the records can be read).
    r = part()
    r.acquire("m1", [(0, 0)], 0, max_records=1)
    r.acquire("m1", [(1, 2)], 0, max_records=5, fetch_offset=1)
    r.acquire("m1", [(3, 7)], 0, max_records=5, fetch_offset=3)
    assert r.acknowledge("m1", [(1, 2, [ACCEPT, REJECT])], 1).error == ErrorCode.none
    five = [ACCEPT, REJECT, ACCEPT, ACCEPT, ACCEPT]
    assert r.acknowledge("m1", [(3, 7, five)], 1).error == ErrorCode.none
    assert [r.record(o) for o in range(1, 8)] == [(ACKED, 1, ""), (ARCHIVED, 1, "")] * 2 + [
        (ACKED, 1, "")] * 3  # fmt: skip


def test_a_run_accepted_whole_leaves_its_lock_to_the_records_redelivered_with_it() -> None:
    # One acquire locks redelivered records and new ones (a run) under one lock: accepting the
    # run unlocks only its own records, and the lock's expiry still releases the others.
    p = part(record_lock_duration_ms=1000)
    p.acquire("m1", [(0, 1)], 0, max_records=2)
    p.acknowledge("m1", [(0, 1, [RELEASE])], 0)
    p.acquire("m1", [(0, 4)], 10, max_records=5)  # 0-1 again, 2-4 new: one lock
    assert p.acknowledge("m1", [(2, 4, [ACCEPT])], 20).error == ErrorCode.none
    assert p.acknowledge("m1", [(0, 0, [ACCEPT])], 30).error == ErrorCode.none
    assert p.next_deadline() == 1010  # offset 1 still holds the lock
    p.expire(1010)
    assert p.record(1) == (AVAILABLE, 2, "")

"""Records of a share partition acquired together (one run, core.share.inflight.Run: Kafka's
InFlightBatch) and accepted whole by their owner, pinned where mutation testing found the fast
path loose (issue 36, `make mutation`: `inflight.accepted_runs`, `SharePartition.acknowledge`).
An ACCEPT must take exactly the runs the request names: none of another member's, none in a
gap between two batches, every one of a batch that covers several, and a request naming an
offset twice is refused whole. And an ACCEPT of whole runs keeps no per-offset state (the point
of runs: a 500-record acquire and accept is a few dict operations), whatever the batches' shape.
Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core.messages import ErrorCode
from coordinator.core.share.partition import (
    AcknowledgeType,
    RecordState,
    SharePartition,
    SharePartitionConfig,
    StateBatch,
)

ACCEPT, RELEASE = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE
ACKED, AVAILABLE = RecordState.ACKNOWLEDGED, RecordState.AVAILABLE


def runs(*spans: tuple[int, int], member: str = "m1") -> SharePartition:
    """One acquire per span, each of new records: one run each."""
    p = SharePartition(SharePartitionConfig())
    for first, last in spans:
        got = p.acquire(member, [(first, last)], 0, max_records=100, fetch_offset=first)
        assert got.count == last - first + 1
    assert sorted((r.first, r.last) for r in p._runs.values()) == sorted(spans)
    return p


def test_an_accept_by_another_member_is_refused_even_for_whole_runs() -> None:
    p = runs((0, 4))
    done = p.acknowledge("m2", [(0, 4, [ACCEPT])], 1)
    assert (done.error, done.message) == (
        ErrorCode.invalid_record_state, "Member is not the owner of offset.")  # fmt: skip
    assert p.start_offset == 0 and p.acquired_by("m1") == [0, 1, 2, 3, 4]


def test_an_accept_takes_every_run_a_batch_covers_and_none_in_a_gap() -> None:
    # Runs 0-4, 5, 6-9: one batch over all three accepts all three.
    p = runs((0, 4), (5, 5), (6, 9))
    assert p.acknowledge("m1", [(0, 9, [ACCEPT])], 1).error == ErrorCode.none
    assert p.start_offset == 10 and p.acquired_by("m1") == []
    # Batches 0-4 and 6-9 leave run 5 (between them, not named) acquired.
    q = runs((0, 4), (5, 5), (6, 9))
    assert q.acknowledge("m1", [(0, 4, [ACCEPT]), (6, 9, [ACCEPT])], 1).error == ErrorCode.none
    assert q.start_offset == 5 and q.acquired_by("m1") == [5]
    assert [q.record(o) for o in range(6, 10)] == [(ACKED, 1, "")] * 4


def test_batches_naming_one_offset_twice_are_refused_whole() -> None:
    # Runs 0-3, 4, 5-9, and batches 0-4 and 4-9: each covers whole runs, but both name 4.
    p = runs((0, 3), (4, 4), (5, 9))
    done = p.acknowledge("m1", [(0, 4, [ACCEPT]), (4, 9, [ACCEPT])], 1)
    assert (done.error, done.message, done.update) == (
        ErrorCode.invalid_record_state, "The offset is not acquired.", None)  # fmt: skip
    assert p.start_offset == 0 and p.acquired_by("m1") == list(range(10))


def test_an_accept_of_whole_runs_of_any_shape_keeps_no_record_per_offset() -> None:
    # The run after it stays one run: nothing was turned into records.
    for first, last, batches in [
        (0, 0, [(0, 0)]),  # a one-record run
        (0, 1, [(0, 1)]),  # a two-record run
        (0, 4, [(0, 4)]),  # a batch ending where the run ends
        (0, 4, [(0, 1), (2, 4)]),  # adjacent batches that together cover the run
    ]:
        p = runs((first, last), (last + 1, last + 5))
        acks = [(a, b, [int(ACCEPT)]) for a, b in batches]
        done = p.acknowledge("m1", acks, 1)
        assert done.error == ErrorCode.none and p.start_offset == last + 1, batches
        assert not p._recs and list(p._runs) == [last + 1], batches


def test_a_lock_no_record_holds_leaves_no_bookkeeping() -> None:
    # Records acquired together, one released and the rest accepted one by one: once no record
    # holds the lock, nothing is kept for it (a partition lives long; locks come and go).
    p = runs((0, 4))
    p.acknowledge("m1", [(0, 4, [RELEASE, ACCEPT, ACCEPT, ACCEPT, ACCEPT])], 1)
    assert p._lock_live == {} and p._lock_ranges == {} and p.next_deadline() is None


def test_a_snapshot_leaves_out_records_still_acquired_below_the_start() -> None:
    # Delivered twice, then the log start passes 0-4 while m1 holds them: the snapshot starts
    # at the start offset (5-9 persisted as AVAILABLE, delivered once before this delivery).
    p = runs((0, 9))
    p.acknowledge("m1", [(0, 9, [RELEASE])], 1)
    p.acquire("m1", [(0, 9)], 2, max_records=10)
    p.advance_start_offset(5)
    assert p.acquired_by("m1") == list(range(10))
    snapshot = p.snapshot()
    assert snapshot.start_offset == 5
    assert snapshot.state_batches == (StateBatch(5, 9, AVAILABLE, 1),)

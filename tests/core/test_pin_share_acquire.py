"""A share partition's acquire (KIP-932, Kafka 4.4's SharePartition.acquire), pinned where
mutation testing found it loose (issue 36, `make mutation`): at the record-lock cap a fetch
inside the window takes no more records than lie from its fetch offset to SPEO
(lastOffsetAndMaxRecords), a fetch from SPEO finds what is in flight there, fetches of new
records keep them as runs, a record's last delivery ends a throttled fetch, and the count of
records done includes SPEO. Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core.share.partition import (
    AcknowledgeType,
    Acquired,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)

RELEASE, REJECT = AcknowledgeType.RELEASE, AcknowledgeType.REJECT
AVAILABLE = RecordState.AVAILABLE


def part(**config: int) -> SharePartition:
    return SharePartition(SharePartitionConfig(**config))  # type: ignore[arg-type]


def ranges_of(got: Acquired) -> list[tuple[int, int, int]]:
    return [(r.first_offset, r.last_offset, r.delivery_count) for r in got.records]


def test_at_the_cap_a_fetch_takes_no_more_than_from_its_fetch_offset_to_the_end() -> None:
    # 3-9 released, the window full (10 locks): a fetch from 5 whose batch starts at 3 takes
    # SPEO - 5 + 1 = 5 records, from the batch's start (3-7), not all seven available.
    p = part(max_record_locks=10)
    p.acquire("m1", [(0, 9)], 0, max_records=10)
    p.acknowledge("m1", [(3, 9, [RELEASE])], 1)
    got = p.acquire("m2", [(3, 19)], 2, max_records=100, fetch_offset=5)
    assert ranges_of(got) == [(3, 7, 2)]


def test_a_fetch_from_the_last_offset_in_flight_finds_it_acquired() -> None:
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    got = p.acquire("m2", [(4, 9)], 1, max_records=10)
    assert ranges_of(got) == [(5, 9, 1)]
    assert p.acquired_by("m1") == [0, 1, 2, 3, 4] and p.acquired_by("m2") == [5, 6, 7, 8, 9]


def test_fetches_of_new_records_keep_each_as_one_run() -> None:
    # Nothing reaches into what is in flight: no per-offset state is made.
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    p.acquire("m2", [(5, 9)], 0, max_records=10)
    assert sorted(p._runs) == [0, 5] and not p._recs


def test_a_record_due_its_last_delivery_ends_a_fetch_already_throttled() -> None:
    # Limit 5 (throttled from 3 deliveries): offset 0 delivered 3 times is throttled and taken;
    # offset 1, delivered 4 times, is due its last delivery: it goes alone, in the next fetch.
    p = part(delivery_count_limit=5)
    p.acquire("m1", [(0, 1)], 0, max_records=10)
    for n in range(2):
        p.acknowledge("m1", [(0, 1, [RELEASE])], n)
        p.acquire("m1", [(0, 1)], n, max_records=10)
    p.acknowledge("m1", [(1, 1, [RELEASE])], 2)
    p.acquire("m1", [(0, 1)], 2, max_records=10, fetch_offset=1)
    p.acknowledge("m1", [(0, 1, [RELEASE])], 3)
    assert [p.record(o) for o in (0, 1)] == [(AVAILABLE, 3, ""), (AVAILABLE, 4, "")]
    assert ranges_of(p.acquire("m1", [(0, 1)], 4, max_records=10)) == [(0, 0, 4)]


def test_a_record_done_at_the_end_offset_counts_as_done() -> None:
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    done = p.acknowledge("m1", [(4, 4, [REJECT])], 1)
    assert p.delivery_complete_count() == 1
    assert done.update is not None and done.update.delivery_complete_count == 1


def test_records_delivered_again_and_accepted_are_all_forgotten_below_the_start() -> None:
    # Delivered twice (per-offset records, not a run), then accepted: the start passes them and
    # every one of them is forgotten (the partition keeps no state below its start).
    p = part()
    p.acquire("m1", [(0, 4)], 0, max_records=10)
    p.acknowledge("m1", [(0, 4, [RELEASE])], 1)
    p.acquire("m1", [(0, 4)], 2, max_records=10)
    p.acknowledge("m1", [(0, 4, [AcknowledgeType.ACCEPT])], 3)
    assert p.start_offset == 5 and not p._recs

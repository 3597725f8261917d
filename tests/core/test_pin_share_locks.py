"""The acquisition locks of a share partition's records delivered again (KIP-932, Kafka 4.4's
SharePartition): records redelivered together share one lock, which expires for all of them and
is gone once all of them are done. Pinned where mutation testing found it loose (issue 36,
`make mutation`: the per-record lock bookkeeping of a redelivery, `SharePartition._take`). Fake
clock, no server.
"""

from __future__ import annotations

from coordinator.core.share.partition import (
    AcknowledgeType,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)

ACCEPT, RELEASE = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE
AVAILABLE = RecordState.AVAILABLE
LOCK_MS = SharePartitionConfig().record_lock_duration_ms


def redelivered(offsets: int) -> SharePartition:
    """Offsets [0, offsets) delivered once, released, and acquired again together at t=1000
    (the second delivery takes them one record at a time, under one new lock)."""
    p = SharePartition(SharePartitionConfig())
    p.acquire("m1", [(0, offsets - 1)], 0, max_records=100)
    p.acknowledge("m1", [(0, offsets - 1, [RELEASE])], 1)
    got = p.acquire("m1", [(0, offsets - 1)], 1000, max_records=100)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got.records] == [
        (0, offsets - 1, 2)
    ]
    return p


def test_a_lock_of_redelivered_records_is_gone_once_all_of_them_are_accepted() -> None:
    p = redelivered(3)
    assert p.next_deadline() == 1000 + LOCK_MS
    p.acknowledge("m1", [(0, 2, [ACCEPT])], 2000)
    assert p.next_deadline() is None  # no record holds the lock: no timer for it
    p.expire(1000 + LOCK_MS)
    assert p.expired_locks == 0  # nor is it counted as expired


def test_a_lock_of_redelivered_records_expires_for_every_one_of_them() -> None:
    p = redelivered(4)
    update = p.expire(1000 + LOCK_MS)
    assert update is not None and p.expired_locks == 1
    assert [p.record(o) for o in range(4)] == [(AVAILABLE, 2, "")] * 4
    assert p.acquired_by("m1") == [] and p.next_fetch_offset() == 0


def test_a_lock_over_records_redelivered_and_new_ones_expires_for_all_of_them() -> None:
    # One acquire takes offsets 0-2 again and 3-9 new, under one lock: its expiry releases all.
    p = SharePartition(SharePartitionConfig())
    p.acquire("m1", [(0, 2)], 0, max_records=100)
    p.acknowledge("m1", [(0, 2, [RELEASE])], 1)
    got = p.acquire("m1", [(0, 9)], 1000, max_records=100)
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got.records] == [
        (0, 2, 2), (3, 9, 1)]  # fmt: skip
    p.expire(1000 + LOCK_MS)
    assert [p.record(o) for o in range(10)] == [(AVAILABLE, 2, "")] * 3 + [(AVAILABLE, 1, "")] * 7

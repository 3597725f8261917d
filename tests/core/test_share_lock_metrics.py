"""What the share metrics read of a share partition (coordinator.serve.share_metrics): expired
acquisition locks are counted once per lock, and the in-flight records by state."""

from __future__ import annotations

from coordinator.serve.share_metrics import record_counts
from tests.core.test_share_partition import LOCK_MS, part, ranges


def test_expired_locks_count_each_lock_once() -> None:
    p = part(delivery_count_limit=2)
    ranges(p, "m1", [(0, 1)], now=0)
    ranges(p, "m2", [(2, 2)], now=1)
    assert record_counts(p) == ({"available": 0, "acquired": 3, "acknowledged": 0,
                                 "archived": 0}, 0)
    p.expire(LOCK_MS - 1)
    assert p.expired_locks == 0
    p.expire(LOCK_MS + 1)
    assert p.expired_locks == 2
    p.expire(LOCK_MS + 2)  # nothing left to expire: stale heap entries do not count
    assert p.expired_locks == 2
    ranges(p, "m2", [(0, 0)], now=LOCK_MS + 3)
    assert record_counts(p) == ({"available": 2, "acquired": 1, "acknowledged": 0,
                                 "archived": 0}, 1)

"""Classic requests to a consumer group's id while the log loads, pinned where `make mutation`
found them loose (issue 36: `handlers/sync.handle`'s routing to classic_in_consumer): while
loading, a SyncGroup of a classic member of a consumer group is COORDINATOR_LOAD_IN_PROGRESS
like any other, never routed to the consumer group (whose state may be half replayed).
Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core.messages import ErrorCode as E
from tests.core.test_pin_consumer_classic import classic_in_consumer_group, sync


def test_a_sync_of_a_classic_member_of_a_consumer_group_waits_for_the_load() -> None:
    c, member = classic_in_consumer_group()
    assert sync(c, member, 1).error is E.none
    c.loading = True  # type: ignore[attr-defined]
    assert sync(c, member, 2).error is E.coordinator_load_in_progress

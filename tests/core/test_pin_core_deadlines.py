"""The core's next deadline covers every kind of group, pinned where `make mutation` found it
loose (issue 36: `GroupCoordinator.next_deadline_ms`): the server sleeps until that instant, so
a share member's session must be in it even when no classic or consumer group has a timer
sooner. Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core.share.messages import ShareGroupHeartbeat
from tests.support.fakeclock import Harness


def test_a_share_member_s_session_is_the_core_s_next_deadline() -> None:
    h = Harness()
    h.call(ShareGroupHeartbeat("sg", "s1", 0, None, ("payments",)))
    session = h.config.share_session_timeout_ms
    assert session < h.config.offsets_retention_check_interval_ms  # the classic timer is later
    assert h.core.next_deadline_ms() == h.now + session

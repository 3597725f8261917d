"""How the core wires its coordinators of each kind of group, pinned where `make mutation` found
it loose (issue 36: `GroupCoordinator.next_deadline_ms`, `CoreState.__post_init__`): the core's
next deadline (the server sleeps until that instant) includes a share member's session even when
no classic or consumer group has a timer sooner, and the consumer groups' records carry wall
clock times (the core's epoch offset), as the classic groups' do. Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.consumer.records import ConsumerGroupRegularExpressionKey
from coordinator.core.share.messages import ShareGroupHeartbeat
from tests.support.fakeclock import EPOCH, Harness


def test_a_share_member_s_session_is_the_core_s_next_deadline() -> None:
    h = Harness()
    h.call(ShareGroupHeartbeat("sg", "s1", 0, None, ("payments",)))
    session = h.config.share_session_timeout_ms
    assert session < h.config.offsets_retention_check_interval_ms  # the classic timer is later
    assert h.core.next_deadline_ms() == h.now + session


def test_a_consumer_group_s_resolved_regex_is_stamped_with_the_wall_clock() -> None:
    h = Harness()
    join = ConsumerGroupHeartbeat("cg", "m1", 0, rebalance_timeout_ms=5_000,
                                  subscribed_topic_regex="pay.*", topic_partitions=())  # fmt: skip
    joined = h.call(join)  # the regex is resolved off this heartbeat, by the next one
    h.now += 1_000
    h.call(ConsumerGroupHeartbeat("cg", "m1", joined.member_epoch, topic_partitions=()))
    (record,) = [r for r in h.records if isinstance(r.key, ConsumerGroupRegularExpressionKey)]
    assert record.value is not None
    assert record.value.topics == ("payments",)  # type: ignore[union-attr]
    assert record.value.timestamp_ms == EPOCH + h.now  # type: ignore[union-attr]

"""A classic member's rejoin of a KIP-848 consumer group (Kafka's
classicGroupJoinToConsumerGroup), pinned where `make mutation` found it loose: a rejoin that
finds a subscribed topic changed bumps the epoch as that topic's metadata change (not as the
member's subscription change), and a known member's refused rejoin answers with its own id."""

from __future__ import annotations

from coordinator.core.consumer.messages import GroupEpochBumped
from coordinator.core.messages import ErrorCode
from tests.core.test_consumer_support import Harness
from tests.core.test_pin_consumer_classic_member import classic_join


def test_a_rejoin_after_its_topic_grew_bumps_as_a_metadata_change() -> None:
    h = Harness()
    h.client("n1")
    h.settle()
    joined = classic_join(h)
    info = h.catalog.get("orders")
    assert info is not None
    h.catalog.put(info.with_partitions(info.partitions + 2))
    h.core.topic_changed("orders")
    h.events.clear()
    classic_join(h, joined.member_id)  # the same subscription
    bumps = [e for e in h.events if isinstance(e, GroupEpochBumped)]
    assert [(e.cause, e.member_id, e.topics) for e in bumps] == [
        ("metadata_changed", None, ("orders",))
    ]


def test_a_known_members_refused_rejoin_answers_with_its_own_id() -> None:
    h = Harness()
    h.client("n1")
    h.settle()
    joined = classic_join(h)
    refused = classic_join(
        h, joined.member_id, protocol="roundrobin", error=ErrorCode.inconsistent_group_protocol
    )
    assert refused.member_id == joined.member_id

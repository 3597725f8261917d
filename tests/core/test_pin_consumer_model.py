"""A KIP-848 group's model (coordinator.core.consumer.model), pinned where `make mutation` found
it loose: a static member gone for good frees its instance id, so a new member with that id is
a new member and counts toward the group's maximum size (only a static member's rejoin is exempt,
KAFKA-20601); a target record naming a topic twice is read as the union of its entries."""

from __future__ import annotations

from coordinator.core.consumer import ConsumerGroupConfig, ConsumerGroupRecord, replay
from coordinator.core.consumer.model import ConsumerGroup
from coordinator.core.consumer.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    TopicPartitions,
)
from tests.core.test_consumer_support import Harness, topic_id


def test_a_static_member_that_left_for_good_frees_its_instance_id() -> None:
    h = Harness(config=ConsumerGroupConfig(max_size=2))
    a = h.client("a", instance_id="i1")
    h.poll(a)
    h.poll(h.client("b"))
    h.settle()
    h.leave(a)  # epoch -1: gone for good, not a static member's pause (-2)
    h.poll(h.client("c"))
    refused = h.poll(h.client("d", instance_id="i1"))
    assert refused.error.name == "group_max_size_reached"
    assert sorted(h.group.members) == ["b", "c"]


def test_a_target_record_naming_a_topic_twice_keeps_both_entries() -> None:
    # We never write one, but a record read from the log is taken as a union of its entries.
    orders = topic_id(0)
    value = ConsumerGroupTargetAssignmentMemberValue(
        (TopicPartitions(orders, (0, 2)), TopicPartitions(orders, (1,)))
    )
    groups: dict[str, ConsumerGroup] = {}
    metadata = ConsumerGroupRecord(ConsumerGroupMetadataKey("g"), ConsumerGroupMetadataValue(1, 0))
    replay(groups, metadata)
    replay(groups, ConsumerGroupRecord(ConsumerGroupTargetAssignmentMemberKey("g", "m"), value))
    assert groups["g"].target_assignment["m"] == {orders: frozenset({0, 1, 2})}

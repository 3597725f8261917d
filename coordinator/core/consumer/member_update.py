"""A ConsumerGroupHeartbeat's changes to its member, and the lost-response check (issue 23;
Kafka's ConsumerGroupMember builders and throwIfConsumerGroupMemberEpochIsInvalid). Pure."""

from __future__ import annotations

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.consumer.model import ConsumerGroupMember, PartitionMap, replace_member
from coordinator.core.consumer.records import TopicPartitions


def owns_subset(owned: tuple[TopicPartitions, ...] | None, assigned: PartitionMap) -> bool:
    if owned is None:
        return False
    for tp in owned:
        partitions = assigned.get(tp.topic_id)
        if partitions is None or not partitions.issuperset(tp.partitions):
            return False
    return True


def updated_member(member: ConsumerGroupMember, req: ConsumerGroupHeartbeat) -> ConsumerGroupMember:
    """The request's non-null fields over the member (Kafka's maybeUpdate* builders)."""
    if (
        req.instance_id is None
        and req.rack_id is None
        and req.rebalance_timeout_ms == -1
        and req.server_assignor is None
        and req.subscribed_topic_names is None
        and req.subscribed_topic_regex is None
        and req.client_id == member.client_id
        and req.client_host == member.client_host
        and member.classic is None
    ):
        return member  # a steady heartbeat changes nothing (and replace() is slow)
    return replace_member(
        member,
        instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
        rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            req.rebalance_timeout_ms
            if req.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        server_assignor=(
            req.server_assignor if req.server_assignor is not None else member.server_assignor
        ),
        subscribed_topic_names=(
            frozenset(req.subscribed_topic_names)
            if req.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        subscribed_topic_regex=(
            req.subscribed_topic_regex
            if req.subscribed_topic_regex is not None
            else member.subscribed_topic_regex
        ),
        client_id=req.client_id,
        client_host=req.client_host,
        classic=None,  # a ConsumerGroupHeartbeat makes it a consumer-protocol member (Kafka)
    )

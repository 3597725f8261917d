"""ConsumerGroupDescribe (API 69): what a consumer group looks like to an admin client (issue 23).
Pure."""

from __future__ import annotations

from coordinator.core.consumer.messages import ConsumerGroupDescription, ConsumerMemberDescription
from coordinator.core.consumer.model import EMPTY_PARTITIONS, ConsumerGroup, to_topic_partitions


def describe_group(group: ConsumerGroup, assignors: tuple[str, ...]) -> ConsumerGroupDescription:
    """`group` with its members' assignments and targets; `assignors`: the configured server
    assignors, the first the default (ConsumerGroup.preferred_server_assignor)."""
    members = tuple(
        ConsumerMemberDescription(
            m.member_id,
            m.instance_id,
            m.rack_id,
            m.member_epoch,
            m.state,
            m.client_id,
            m.client_host,
            tuple(sorted(m.subscribed_topic_names)),
            m.subscribed_topic_regex or None,
            to_topic_partitions(m.assigned_partitions),
            to_topic_partitions(group.target_assignment.get(mid, EMPTY_PARTITIONS)),
            m.classic is not None,
        )
        for mid, m in sorted(group.members.items())
    )
    return ConsumerGroupDescription(
        group.group_id,
        group.state,
        group.group_epoch,
        group.assignment_epoch,
        group.preferred_server_assignor(assignors),
        members,
    )

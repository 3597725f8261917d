"""Builders of the consumer-group records from members (Kafka's GroupCoordinatorRecordHelpers).

Pure: no I/O.
"""

from __future__ import annotations

from coordinator.core.consumer.model import ConsumerGroupMember, PartitionMap, to_topic_partitions
from coordinator.core.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
)

__all__ = [
    "current_assignment_record",
    "remove_member_records",
    "subscription_record",
    "target_record",
]


def subscription_record(group_id: str, m: ConsumerGroupMember) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(
        ConsumerGroupMemberMetadataKey(group_id, m.member_id),
        ConsumerGroupMemberMetadataValue(
            m.instance_id,
            m.rack_id,
            m.client_id,
            m.client_host,
            tuple(sorted(m.subscribed_topic_names)),
            m.subscribed_topic_regex,
            m.rebalance_timeout_ms,
            m.server_assignor,
            m.classic,
        ),
    )


def target_record(group_id: str, member_id: str, target: PartitionMap) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(
        ConsumerGroupTargetAssignmentMemberKey(group_id, member_id),
        ConsumerGroupTargetAssignmentMemberValue(to_topic_partitions(target)),
    )


def current_assignment_record(group_id: str, m: ConsumerGroupMember) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(
        ConsumerGroupCurrentMemberAssignmentKey(group_id, m.member_id),
        ConsumerGroupCurrentMemberAssignmentValue(
            m.member_epoch,
            m.previous_member_epoch,
            int(m.state),
            to_topic_partitions(m.assigned_partitions),
            to_topic_partitions(m.partitions_pending_revocation),
        ),
    )


def remove_member_records(group_id: str, member_id: str) -> list[ConsumerGroupRecord]:
    """Kafka's removeMember, in its order: current assignment, target, subscription."""
    return [
        ConsumerGroupRecord(ConsumerGroupCurrentMemberAssignmentKey(group_id, member_id), None),
        ConsumerGroupRecord(ConsumerGroupTargetAssignmentMemberKey(group_id, member_id), None),
        ConsumerGroupRecord(ConsumerGroupMemberMetadataKey(group_id, member_id), None),
    ]

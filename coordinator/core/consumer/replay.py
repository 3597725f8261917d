"""Replay: apply one consumer-group record to the groups (Kafka 4.1's GroupMetadataManager.replay).

The only way a `ConsumerGroup` changes. The coordinator emits records and replays each at once,
and loading replays the log with the same function, so the live groups and the replayed ones
are the same by construction (the property tests check it).

Rules, as Kafka's:
- a value creates the group if it does not exist; a tombstone for an unknown group or member
  is ignored;
- a member's current-assignment tombstone leaves it at epoch -1 with nothing assigned; its
  subscription tombstone then removes it, and raises if the other two tombstones did not come
  first (Kafka writes them in the order current assignment, target, subscription);
- the group's tombstone deletes it and raises if members or a target assignment remain.

Pure: no I/O.
"""

from __future__ import annotations

from typing import assert_never

from coordinator.core.consumer.model import (
    EMPTY_PARTITIONS,
    LEAVE_GROUP_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    IllegalConsumerState,
    MemberState,
    ResolvedRegex,
    from_topic_partitions,
    replace_member,
)
from coordinator.core.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)

__all__ = ["replay"]


def replay(groups: dict[str, ConsumerGroup], record: ConsumerGroupRecord) -> None:
    key, value = record.key, record.value
    group = groups.get(key.group_id)
    if group is None:
        if value is None:
            return  # a tombstone for a group we do not know
        group = groups[key.group_id] = ConsumerGroup(key.group_id)
    match key:
        case ConsumerGroupMetadataKey():
            assert value is None or isinstance(value, ConsumerGroupMetadataValue)
            _group_metadata(groups, group, value)
        case ConsumerGroupPartitionMetadataKey():
            group.has_subscription_metadata_record = value is not None
        case ConsumerGroupMemberMetadataKey():
            assert value is None or isinstance(value, ConsumerGroupMemberMetadataValue)
            _member_metadata(group, key.member_id, value)
        case ConsumerGroupTargetAssignmentMetadataKey():
            assert value is None or isinstance(value, ConsumerGroupTargetAssignmentMetadataValue)
            _target_metadata(group, value)
        case ConsumerGroupTargetAssignmentMemberKey():
            assert value is None or isinstance(value, ConsumerGroupTargetAssignmentMemberValue)
            if value is None:
                group.remove_target(key.member_id)
            else:
                group.update_target(key.member_id, from_topic_partitions(value.topic_partitions))
        case ConsumerGroupCurrentMemberAssignmentKey():
            assert value is None or isinstance(value, ConsumerGroupCurrentMemberAssignmentValue)
            _current_assignment(group, key.member_id, value)
        case ConsumerGroupRegularExpressionKey():
            assert value is None or isinstance(value, ConsumerGroupRegularExpressionValue)
            if value is None:
                group.resolved_regexes.pop(key.regular_expression, None)
            else:
                group.resolved_regexes[key.regular_expression] = ResolvedRegex(
                    frozenset(value.topics), value.version, value.timestamp_ms
                )
        case _:
            assert_never(key)


def _group_metadata(
    groups: dict[str, ConsumerGroup], group: ConsumerGroup, value: ConsumerGroupMetadataValue | None
) -> None:
    if value is not None:
        group.group_epoch = value.epoch
        group.metadata_hash = value.metadata_hash
        return
    if group.members:
        raise IllegalConsumerState(
            f"tombstone for group {group.group_id!r} with {len(group.members)} members"
        )
    if group.target_assignment:
        raise IllegalConsumerState(f"tombstone for group {group.group_id!r} with a target")
    if group.assignment_epoch != -1:
        raise IllegalConsumerState(
            f"tombstone for group {group.group_id!r} before its target assignment tombstone"
        )
    del groups[group.group_id]


def _target_metadata(
    group: ConsumerGroup, value: ConsumerGroupTargetAssignmentMetadataValue | None
) -> None:
    if value is not None:
        group.assignment_epoch = value.assignment_epoch
        return
    if group.target_assignment:
        raise IllegalConsumerState(
            f"target assignment tombstone for {group.group_id!r} with member targets left"
        )
    group.assignment_epoch = -1


def _member_metadata(
    group: ConsumerGroup, member_id: str, value: ConsumerGroupMemberMetadataValue | None
) -> None:
    old = group.members.get(member_id)
    if value is None:
        if old is None:
            return
        if old.member_epoch != LEAVE_GROUP_MEMBER_EPOCH:
            raise IllegalConsumerState(
                f"member {member_id!r} deleted before its current assignment tombstone"
            )
        if member_id in group.target_assignment:
            raise IllegalConsumerState(
                f"member {member_id!r} deleted before its target assignment tombstone"
            )
        group.remove_member(member_id)
        return
    base = old if old is not None else ConsumerGroupMember(member_id)
    group.update_member(
        replace_member(
            base,
            instance_id=value.instance_id,
            rack_id=value.rack_id,
            client_id=value.client_id,
            client_host=value.client_host,
            subscribed_topic_names=frozenset(value.subscribed_topic_names),
            subscribed_topic_regex=value.subscribed_topic_regex or "",
            rebalance_timeout_ms=value.rebalance_timeout_ms,
            server_assignor=value.server_assignor,
            classic=value.classic_member_metadata,
        )
    )


def _current_assignment(
    group: ConsumerGroup, member_id: str, value: ConsumerGroupCurrentMemberAssignmentValue | None
) -> None:
    old = group.members.get(member_id)
    if value is None:
        if old is None:
            return
        group.update_member(
            replace_member(
                old,
                member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                assigned_partitions=EMPTY_PARTITIONS,
                partitions_pending_revocation=EMPTY_PARTITIONS,
            )
        )
        return
    base = old if old is not None else ConsumerGroupMember(member_id)
    group.update_member(
        replace_member(
            base,
            member_epoch=value.member_epoch,
            previous_member_epoch=value.previous_member_epoch,
            state=MemberState.from_value(value.state),
            assigned_partitions=from_topic_partitions(value.assigned_partitions),
            partitions_pending_revocation=from_topic_partitions(
                value.partitions_pending_revocation
            ),
        )
    )

"""The checks a ConsumerGroupHeartbeat passes before it changes anything (Kafka's
GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid, then
GroupMetadataManager's group, member, epoch and instance-id checks). Each refusal is a
`Refused` with Kafka's error and message; the coordinator answers it with no records.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses

from coordinator.core.consumer.member_update import owns_subset
from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.consumer.model import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
)
from coordinator.core.messages import ErrorCode

__all__ = ["Refused", "check_epoch", "check_not_full", "member_for", "request_error"]


class Refused(Exception):
    """Kafka's ApiException: caught in `heartbeat` and turned into the response's error."""

    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def request_error(req: ConsumerGroupHeartbeat, assignors: tuple[str, ...]) -> Refused | None:
    """GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid, in order."""
    epoch = req.member_epoch
    if (req.api_version >= 1 or epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH) and not (
        req.member_id
    ):
        return Refused(ErrorCode.invalid_request, "MemberId can't be empty.")
    if not req.group_id:
        return Refused(ErrorCode.invalid_request, "GroupId can't be empty.")
    if req.instance_id == "":
        return Refused(ErrorCode.invalid_request, "InstanceId can't be empty.")
    if req.rack_id == "":
        return Refused(ErrorCode.invalid_request, "RackId can't be empty.")
    if epoch == 0:
        if req.rebalance_timeout_ms == -1:
            return Refused(
                ErrorCode.invalid_request,
                "RebalanceTimeoutMs must be provided in first request.",
            )
        if req.topic_partitions is None or req.topic_partitions:
            return Refused(
                ErrorCode.invalid_request, "TopicPartitions must be empty when (re-)joining."
            )
        if req.subscribed_topic_names is None and req.subscribed_topic_regex is None:
            return Refused(
                ErrorCode.invalid_request,
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining.",
            )
    elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            return Refused(ErrorCode.invalid_request, "InstanceId can't be null.")
    elif epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        return Refused(ErrorCode.invalid_request, "MemberEpoch is invalid.")
    if req.server_assignor is not None and req.server_assignor not in assignors:
        return Refused(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {req.server_assignor} is not supported. Supported assignors: "
            f"{', '.join(assignors)}.",
        )
    return None


def check_not_full(group: ConsumerGroup, req: ConsumerGroupHeartbeat, max_size: int) -> None:
    if req.instance_id is not None and req.instance_id in group.static_members:
        return  # a static member's rejoin does not grow the group (KAFKA-20601)
    if len(group.members) >= max_size and (not req.member_id or req.member_id not in group.members):
        raise Refused(
            ErrorCode.group_max_size_reached,
            f"The consumer group has reached its maximum capacity of {max_size} members.",
        )


def member_for(
    group: ConsumerGroup, req: ConsumerGroupHeartbeat, member_id: str, joining: bool
) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
    """The member the heartbeat is for, and the static member it replaces (if any)."""
    if req.instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            if not joining:
                raise Refused(
                    ErrorCode.unknown_member_id,
                    f"Member {member_id} is not a member of group {group.group_id}.",
                )
            return ConsumerGroupMember(member_id), None
        check_epoch(member, req)
        return member, None
    existing = group.static_member(req.instance_id)
    if joining:
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id), None
        # A classic member's instance id is taken over at once (Kafka: the unreleased
        # check is only between two consumer-protocol members).
        if existing.classic is None and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise Refused(
                ErrorCode.unreleased_instance_id,
                f"Static member {member_id} with instance id {req.instance_id} cannot join "
                f"the group because the instance id is owned by {existing.member_id} member.",
            )
        # The new member id takes the departed static member's place and assignment.
        copy = dataclasses.replace(
            existing, member_id=member_id, member_epoch=0, previous_member_epoch=0
        )
        return copy, existing
    if existing is None:
        raise Refused(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
    if existing.member_id != member_id:
        raise Refused(
            ErrorCode.fenced_instance_id,
            f"Static member {member_id} with instance id {req.instance_id} was fenced by "
            f"member {existing.member_id}.",
        )
    check_epoch(existing, req)
    return existing, None


def check_epoch(member: ConsumerGroupMember, req: ConsumerGroupHeartbeat) -> None:
    """Kafka's throwIfConsumerGroupMemberEpochIsInvalid. Epoch 0 always passes (a rejoin,
    KAFKA-19233); the previous epoch passes when the member owns a subset of its assignment
    (the response that bumped its epoch was lost)."""
    received = req.member_epoch
    if received == 0:
        return
    if received > member.member_epoch or (
        received < member.member_epoch
        and (
            received != member.previous_member_epoch
            or not owns_subset(req.topic_partitions, member.assigned_partitions)
        )
    ):
        raise Refused(
            ErrorCode.fenced_member_epoch,
            f"The consumer group member has a {'greater' if received > member.member_epoch else 'smaller'} "  # noqa: E501
            f"member epoch ({received}) than the one known by the group coordinator "
            f"({member.member_epoch}). The member must abandon all its partitions and rejoin.",
        )

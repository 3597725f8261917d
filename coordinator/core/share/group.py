"""One share group and its members (Kafka 4.4's ShareGroup / ShareGroupMember), and `replay`,
the only way they change: each share-group record applied in log order.

Epochs are KIP-848's: the group epoch is bumped by membership, subscription and topic metadata
(hash) changes; the assignment epoch is the group epoch the target assignment was computed for;
a member's epoch is the assignment epoch it was last given. A share member never revokes: it
takes its target as soon as it heartbeats, and a partition may be held by many members.

Invariants:
- `targets[m]` exists for every member m once an assignment was computed for it;
- the state is Empty with no members, else Stable (ShareGroup.ShareGroupState: share groups
  have no Assigning/Reconciling states);
- values are immutable; `replay` swaps them.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from coordinator.core.consumer.records import TopicPartitions
from coordinator.core.share.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupKey,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
    ShareGroupValue,
)

__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "PartitionMap",
    "ShareGroup",
    "ShareGroupMember",
    "ShareGroupState",
    "from_topic_partitions",
    "replay",
    "to_topic_partitions",
]

LEAVE_GROUP_MEMBER_EPOCH = -1  # ShareGroupHeartbeatRequest.LEAVE_GROUP_MEMBER_EPOCH
PartitionMap = Mapping[uuid.UUID, frozenset[int]]
_EMPTY: PartitionMap = MappingProxyType({})


class ShareGroupState(enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class ShareGroupMember:
    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: tuple[str, ...] = ()  # sorted
    assigned: PartitionMap = field(default_factory=lambda: _EMPTY)


@dataclass(eq=False, slots=True)
class ShareGroup:
    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareGroupMember] = field(default_factory=dict)
    targets: dict[str, PartitionMap] = field(default_factory=dict)

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY


def to_topic_partitions(partitions: PartitionMap) -> tuple[TopicPartitions, ...]:
    return tuple(
        TopicPartitions(tid, tuple(sorted(ps)))
        for tid, ps in sorted(partitions.items(), key=lambda kv: kv[0].bytes)
        if ps
    )


def from_topic_partitions(tps: Iterable[TopicPartitions]) -> PartitionMap:
    return MappingProxyType({tp.topic_id: frozenset(tp.partitions) for tp in tps if tp.partitions})


def replay(
    groups: dict[str, ShareGroup], key: ShareGroupKey, value: ShareGroupValue | None
) -> None:
    """Apply one record. A tombstone of type 11 deletes the group (Kafka's replay of a
    ShareGroupMetadata tombstone); member tombstones remove the member's parts."""
    gid = key.group_id
    group = groups.get(gid)
    if group is None:
        if value is None:
            return
        group = groups[gid] = ShareGroup(gid)
    match key:
        case ShareGroupMetadataKey():
            if value is None:
                del groups[gid]
                return
            assert isinstance(value, ShareGroupMetadataValue)
            group.group_epoch, group.metadata_hash = value.epoch, value.metadata_hash
        case ShareGroupTargetAssignmentMetadataKey():
            if isinstance(value, ShareGroupTargetAssignmentMetadataValue):
                group.assignment_epoch = value.assignment_epoch
        case ShareGroupTargetAssignmentMemberKey():
            if value is None:
                group.targets.pop(key.member_id, None)
            else:
                assert isinstance(value, ShareGroupTargetAssignmentMemberValue)
                group.targets[key.member_id] = from_topic_partitions(value.topic_partitions)
        case ShareGroupMemberMetadataKey():
            if value is None:
                group.members.pop(key.member_id, None)
                return
            assert isinstance(value, ShareGroupMemberMetadataValue)
            old = group.members.get(key.member_id) or ShareGroupMember(key.member_id)
            group.members[key.member_id] = replace(
                old,
                rack_id=value.rack_id,
                client_id=value.client_id,
                client_host=value.client_host,
                subscribed_topic_names=value.subscribed_topic_names,
            )
        case ShareGroupCurrentMemberAssignmentKey():
            member = group.members.get(key.member_id)
            if value is None or member is None:
                return  # the member tombstone follows (or came first)
            assert isinstance(value, ShareGroupCurrentMemberAssignmentValue)
            group.members[key.member_id] = replace(
                member,
                member_epoch=value.member_epoch,
                previous_member_epoch=value.previous_member_epoch,
                assigned=from_topic_partitions(value.assigned_partitions),
            )

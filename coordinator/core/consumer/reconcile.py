"""Reconciliation of one member toward the target assignment: Kafka 4.1's CurrentAssignmentBuilder.

Given a member, the target assignment epoch and the member's target, and who holds what
(`partition_epoch(topic_id, partition)` -> the holder's epoch, or -1 when free), return the
member's next state:

- STABLE at an older epoch, or UNRELEASED_PARTITIONS: compute the next assignment.
- UNREVOKED_PARTITIONS: wait while the member still reports (in the heartbeat's owned
  partitions) one of the partitions pending revocation; once none is reported (an omitted
  list counts as "still owns them"), move on from epoch + 1.
- UNKNOWN: fenced unless the member reports that it owns nothing.

The next assignment (`_next`): kept = assigned ∩ target; to revoke = assigned - target; to add
= target - kept, minus the partitions some *other* member still holds (unreleased).
- something to revoke that the member still owns: UNREVOKED_PARTITIONS at its current epoch,
  only `kept` assigned (revocation before assignment: nothing new is handed out yet);
- otherwise the member moves to the target epoch with kept + the free partitions to add:
  UNRELEASED_PARTITIONS if some partition of its target is still held elsewhere, else STABLE.

So a partition is never assigned to a member while another member holds it: it stays held until
its holder reports it revoked (or is fenced), which is what "revocation before assignment" means.

Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from types import MappingProxyType

from coordinator.core.consumer.model import (
    EMPTY_PARTITIONS,
    ConsumerGroupMember,
    MemberState,
    PartitionMap,
    replace_member,
)
from coordinator.core.consumer.records import TopicPartitions

__all__ = ["MemberFenced", "PartitionEpoch", "reconcile"]

PartitionEpoch = Callable[[uuid.UUID, int], int]


class MemberFenced(Exception):
    """The member must abandon its partitions and rejoin (FENCED_MEMBER_EPOCH)."""


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: PartitionMap,
    partition_epoch: PartitionEpoch,
    owned: tuple[TopicPartitions, ...] | None,
) -> ConsumerGroupMember:
    match member.state:
        case MemberState.STABLE:
            if member.member_epoch == target_epoch:
                return member
            return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
        case MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, member.partitions_pending_revocation):
                return member
            return _next(
                member, member.member_epoch + 1, target_epoch, target, partition_epoch, owned
            )
        case MemberState.UNRELEASED_PARTITIONS:
            return _next(member, member.member_epoch, target_epoch, target, partition_epoch, owned)
        case MemberState.UNKNOWN:
            if owned is None or owned:
                raise MemberFenced("the member is in an unknown state")
            return _next(member, target_epoch, target_epoch, target, partition_epoch, owned)
    raise AssertionError(member.state)  # pragma: no cover -- every MemberState is matched


def _owns_any(owned: tuple[TopicPartitions, ...] | None, pending: PartitionMap) -> bool:
    """Kafka's ownsRevokedPartitions: an omitted owned list means it may still own them."""
    if owned is None:
        return True
    for tp in owned:
        revoking = pending.get(tp.topic_id)
        if revoking and any(p in revoking for p in tp.partitions):
            return True
    return False


def _next(
    member: ConsumerGroupMember,
    member_epoch: int,
    target_epoch: int,
    target: PartitionMap,
    partition_epoch: PartitionEpoch,
    owned: tuple[TopicPartitions, ...] | None,
) -> ConsumerGroupMember:
    assigned = member.assigned_partitions
    pending_revocation = member.partitions_pending_revocation
    new_assigned: dict[uuid.UUID, frozenset[int]] = {}
    new_revoke: dict[uuid.UUID, frozenset[int]] = {}
    new_add: dict[uuid.UUID, frozenset[int]] = {}
    unreleased = False
    for tid in set(target) | set(assigned):
        want = target.get(tid, frozenset())
        have = assigned.get(tid, frozenset())
        kept = have & want
        revoke = have - kept
        add = want - kept
        mine = pending_revocation.get(tid, frozenset())
        # Held by another member: not handed out until released. A partition this member
        # itself holds pending revocation is not "another member's" (only one holder).
        held = frozenset(p for p in add if partition_epoch(tid, p) != -1 and p not in mine)
        if held:
            unreleased = True
            add -= held
        if kept:
            new_assigned[tid] = kept
        if revoke:
            new_revoke[tid] = revoke
        if add:
            new_add[tid] = add

    # Kafka's Builder.updateMemberEpoch: the previous epoch is the one being replaced.
    if new_revoke and _owns_any(owned, new_revoke):
        return replace_member(
            member,
            state=MemberState.UNREVOKED_PARTITIONS,
            member_epoch=member_epoch,
            previous_member_epoch=member.member_epoch,
            assigned_partitions=_freeze(new_assigned),
            partitions_pending_revocation=_freeze(new_revoke),
        )
    for tid, add in new_add.items():
        new_assigned[tid] = new_assigned.get(tid, frozenset()) | add
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return replace_member(
        member,
        state=state,
        member_epoch=target_epoch,
        previous_member_epoch=member.member_epoch,
        assigned_partitions=_freeze(new_assigned),
        partitions_pending_revocation=EMPTY_PARTITIONS,
    )


def _freeze(partitions: dict[uuid.UUID, frozenset[int]]) -> PartitionMap:
    return MappingProxyType(partitions) if partitions else EMPTY_PARTITIONS

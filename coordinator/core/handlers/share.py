"""ShareGroupHeartbeat (API 76) and ShareGroupDescribe (API 77): the KIP-932 share groups of
coordinator.core.share inside the core, beside the classic and consumer groups.

Rules:
- One namespace of group ids: an id is a classic, a consumer or a share group. A heartbeat or a
  describe naming a classic or consumer group is GROUP_ID_NOT_FOUND ("Group X is not a share
  group.", Kafka's getOrMaybeCreateShareGroup), even an Empty classic group holding offsets.
- While the log loads every request answers COORDINATOR_LOAD_IN_PROGRESS.
- The share coordinator's records are the core's records, persisted before the reply leaves and
  replayed by core.loading. A member leaving or fenced releases its acquired records; the
  share partitions' updates go to `Effects.share_updates` for the shell that persists them.
"""

from __future__ import annotations

from coordinator.core.effects import Effects
from coordinator.core.events import GroupCreated, LeaveReason, MemberJoined, MemberLeft
from coordinator.core.messages import ErrorCode
from coordinator.core.records import Record
from coordinator.core.share.messages import (
    DescribedShareGroup,
    ShareGroupDescribe,
    ShareGroupDescribeResult,
    ShareGroupHeartbeat,
    ShareHeartbeatResponse,
    ShareResult,
)
from coordinator.core.share.records import (
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
)
from coordinator.core.state import CoreState

E = ErrorCode


def other_type(state: CoreState, group_id: str) -> bool:
    """The id is a classic or a consumer group's."""
    return group_id in state.groups or group_id in state.consumer.groups


def heartbeat(
    state: CoreState, reply_to: int, cmd: ShareGroupHeartbeat, now_ms: int, fx: Effects
) -> None:
    if state.loading:
        fx.replies.append((reply_to, ShareHeartbeatResponse(E.coordinator_load_in_progress)))
        return
    if cmd.group_id and other_type(state, cmd.group_id):
        message = f"Group {cmd.group_id} is not a share group."
        fx.replies.append((reply_to, ShareHeartbeatResponse(E.group_id_not_found, message)))
        return
    before = state.share.groups.get(cmd.group_id)
    known = frozenset(before.members) if before is not None else frozenset()
    result = state.share.heartbeat(cmd, now_ms)
    _apply(result, fx)
    if before is None and result.records:
        fx.events.append(GroupCreated(cmd.group_id))
    _membership_events(result, known, LeaveReason.LEFT, fx)
    fx.replies.append((reply_to, result.response))


def describe(
    state: CoreState, reply_to: int, cmd: ShareGroupDescribe, now_ms: int, fx: Effects
) -> None:
    if state.loading:
        groups = tuple(
            DescribedShareGroup(g, E.coordinator_load_in_progress) for g in cmd.group_ids
        )
        fx.replies.append((reply_to, ShareGroupDescribeResult(groups)))
        return
    foreign = [g for g in cmd.group_ids if other_type(state, g)]
    result = state.share.describe(cmd, foreign)
    fixed = tuple(
        DescribedShareGroup(g.group_id, E.invalid_group_id) if not g.group_id else g
        for g in result.groups
    )
    fx.replies.append((reply_to, ShareGroupDescribeResult(fixed)))


def expire(state: CoreState, now_ms: int, fx: Effects) -> None:
    """The share groups' session timeouts (none fire while loading)."""
    if state.loading:
        return
    for result in state.share.expire(now_ms):
        _apply(result, fx)
        _membership_events(result, None, LeaveReason.EXPIRED, fx)


def _membership_events(
    result: ShareResult, known: frozenset[str] | None, reason: LeaveReason, fx: Effects
) -> None:
    """The history's MemberJoined / MemberLeft (coordinator.serve.history), read off the
    records: a member's metadata record for a member not `known` before is a join, its
    tombstone a leave (`known` None: every member was known)."""
    for r in result.records:
        if not isinstance(r.key, ShareGroupMemberMetadataKey):
            continue
        gid, mid = r.key.group_id, r.key.member_id
        if r.value is None:
            fx.events.append(MemberLeft(gid, mid, None, reason))
        elif known is not None and mid not in known:
            assert isinstance(r.value, ShareGroupMemberMetadataValue)
            fx.events.append(MemberJoined(gid, mid, None, r.value.client_id, r.value.client_host))


def _apply(result: ShareResult, fx: Effects) -> None:
    fx.records.extend(Record(r.key, r.value) for r in result.records)
    fx.share_updates.extend(result.partition_updates)

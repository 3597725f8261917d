"""LeaveGroup v0-v5 (docs/protocol.md §8).

Rules: an empty group id -> INVALID_GROUP_ID; loading -> COORDINATOR_LOAD_IN_PROGRESS; an unknown
group answers UNKNOWN_MEMBER_ID for every member (top-level NONE, v3+ batch form); the group's
state (STATE_REPLIES, Check.LEAVE). Each member (v3+: several, KIP-345) leaves by member id, by
instance id alone (an admin removing a static member), or as a pending member (KIP-394); a wrong
instance id -> FENCED_INSTANCE_ID. A member leaving a Stable or CompletingRebalance group starts
a rebalance; one leaving a group that prepares one may complete its join phase. A non-empty
KIP-848 consumer group's id: its classic members leave it (core.handlers.classic_in_consumer).
"""

from __future__ import annotations

from coordinator.core.effects import Effects
from coordinator.core.events import LeaveReason, RebalanceCause, RebalanceTrigger
from coordinator.core.group import STATE_REPLIES, Check, GroupState
from coordinator.core.handlers import classic_in_consumer
from coordinator.core.messages import ErrorCode, LeaveGroup, LeaveGroupResult, LeftMember
from coordinator.core.rebalance import (
    drop_member,
    maybe_complete_join,
    member_trigger,
    prepare_rebalance,
)
from coordinator.core.state import CoreState

E = ErrorCode
_STABLE = GroupState.STABLE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_PREPARING = GroupState.PREPARING_REBALANCE


def handle(state: CoreState, reply_to: int, cmd: LeaveGroup, now_ms: int, fx: Effects) -> None:
    if not cmd.group_id:
        fx.replies.append((reply_to, LeaveGroupResult(E.invalid_group_id)))
        return
    if state.loading:
        fx.replies.append((reply_to, LeaveGroupResult(E.coordinator_load_in_progress)))
        return
    group = state.groups.get(cmd.group_id)
    if group is None:
        consumer_group = state.consumer.groups.get(cmd.group_id)
        if consumer_group is not None and consumer_group.members:
            classic_in_consumer.leave(state, reply_to, cmd, now_ms, fx)
            return
        left = tuple(
            LeftMember(m.member_id, m.group_instance_id, E.unknown_member_id) for m in cmd.members
        )
        fx.replies.append((reply_to, LeaveGroupResult(E.none, left)))
        return
    # Unreachable, so equivalent under mutation: this coordinator never unloads a group.
    error = STATE_REPLIES[group.state][Check.LEAVE]  # pragma: no mutate
    if error is not None:  # pragma: no mutate block
        fx.replies.append((reply_to, LeaveGroupResult(error)))
        return
    results: list[LeftMember] = []
    removed = pending_removed = False
    trigger: RebalanceTrigger | None = None  # the first member removed names the rebalance
    for m in cmd.members:
        error = E.none
        if not m.member_id:
            known = (
                group.static_members.get(m.group_instance_id)
                # Equivalent under mutation: static_members has no None key either.
                if m.group_instance_id is not None  # pragma: no mutate
                else None
            )
            if known is None:
                error = E.unknown_member_id
            else:  # admin removal of a static member by instance id (KIP-345)
                member = group.members[known]
                trigger = trigger or member_trigger(member)
                drop_member(group, member, LeaveReason.LEFT, fx)
                removed = True
        elif m.member_id in group.pending_members:
            del group.pending_members[m.member_id]
            pending_removed = True
        else:
            invalid = group.validate_member(m.member_id, m.group_instance_id)
            if invalid is not None:
                error = E.fenced_instance_id if invalid else E.unknown_member_id
            else:
                member = group.members[m.member_id]
                trigger = trigger or member_trigger(member)
                drop_member(group, member, LeaveReason.LEFT, fx)
                removed = True
        results.append(LeftMember(m.member_id, m.group_instance_id, error))
    if removed and group.state in (_STABLE, _COMPLETING):
        prepare_rebalance(state, group, RebalanceCause.MEMBER_LEFT, trigger, now_ms, fx)
    elif (removed or pending_removed) and group.state is _PREPARING:
        maybe_complete_join(state, group, now_ms, fx)
    fx.replies.append((reply_to, LeaveGroupResult(E.none, tuple(results))))

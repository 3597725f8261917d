"""Heartbeat v0-v4 (docs/protocol.md §7): the hot path.

Rules: an empty group id -> INVALID_GROUP_ID; while loading, NONE (as Kafka answers); an unknown
group -> UNKNOWN_MEMBER_ID; the group's state (STATE_REPLIES, Check.HEARTBEAT); a static member's
instance id (unknown -> UNKNOWN_MEMBER_ID, another member's -> FENCED_INSTANCE_ID); the member;
the generation (ILLEGAL_GENERATION); then the session is renewed and the state answers
(Check.HEARTBEAT_MEMBER: REBALANCE_IN_PROGRESS while the group prepares a rebalance). A heartbeat
writes no record and emits no event, so it needs no Effects (`answer`). A non-empty KIP-848
consumer group's id: its classic member's heartbeat (core.handlers.classic_in_consumer).
"""

from __future__ import annotations

from coordinator.core.effects import Effects
from coordinator.core.group import STATE_REPLIES, Check, GroupState
from coordinator.core.handlers import classic_in_consumer
from coordinator.core.messages import ErrorCode, Heartbeat, HeartbeatResult
from coordinator.core.state import CoreState

E = ErrorCode
_ANSWERS = {code: HeartbeatResult(code) for code in ErrorCode}  # immutable: shared
_BY_STATE = {s: STATE_REPLIES[s][Check.HEARTBEAT] for s in GroupState}
_BY_STATE_MEMBER = {
    s: _ANSWERS[STATE_REPLIES[s][Check.HEARTBEAT_MEMBER] or E.none] for s in GroupState
}
_UNKNOWN = _ANSWERS[E.unknown_member_id]
_LOADING = _ANSWERS[E.none]  # Kafka answers success while loading (GCS heartbeat)


def answer(state: CoreState, cmd: Heartbeat, now_ms: int) -> HeartbeatResult:
    if not cmd.group_id:
        return _ANSWERS[E.invalid_group_id]
    if state.loading:
        return _LOADING
    group = state.groups.get(cmd.group_id)
    if group is None:
        if cmd.group_id in state.consumer.groups:  # off the hot path: not a classic group
            return classic_in_consumer.heartbeat(state, cmd, now_ms)
        return _UNKNOWN
    group_state = group.state
    error = _BY_STATE[group_state]
    if error is not None:
        return _ANSWERS[error]
    instance_id = cmd.group_instance_id
    if instance_id is not None:
        known = group.static_members.get(instance_id)
        if known is None:
            return _UNKNOWN
        if known != cmd.member_id:
            return _ANSWERS[E.fenced_instance_id]
    member = group.members.get(cmd.member_id)
    if member is None:
        return _UNKNOWN
    if cmd.generation_id != group.generation_id:
        return _ANSWERS[E.illegal_generation]
    state.timers.schedule_session(group, member, member.session_timeout_ms, now_ms)
    return _BY_STATE_MEMBER[group_state]


def handle(state: CoreState, reply_to: int, cmd: Heartbeat, now_ms: int, fx: Effects) -> None:
    fx.replies.append((reply_to, answer(state, cmd, now_ms)))

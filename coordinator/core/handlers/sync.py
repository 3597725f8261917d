"""SyncGroup v0-v5 (docs/protocol.md §6).

Rules, in Kafka's order (§6.1; the v5+ null protocol type/name check is the adapter's): an empty
group id -> INVALID_GROUP_ID; loading -> COORDINATOR_LOAD_IN_PROGRESS; an unknown group, then the
group's state (STATE_REPLIES, Check.SYNC); the member and instance id; the generation; the
protocol type and name; then the state again (Check.SYNC_MEMBER). A Stable group answers the
member's stored assignment at once. In CompletingRebalance the request is parked; the leader's
brings the assignment, whose record must be durable before every parked SyncGroup is answered
and the group is Stable. A non-empty KIP-848 consumer group's id: its classic member's SyncGroup
(core.handlers.classic_in_consumer, issue 23 item 6).
"""

from __future__ import annotations

from coordinator.core.effects import Effects
from coordinator.core.group import STATE_REPLIES, Check, ClassicGroup, GroupState
from coordinator.core.handlers import classic_in_consumer
from coordinator.core.messages import ErrorCode, SyncGroup, SyncGroupResult
from coordinator.core.rebalance import answer_syncs, group_record, rebalance_completed
from coordinator.core.state import CoreState

E = ErrorCode


def handle(state: CoreState, reply_to: int, cmd: SyncGroup, now_ms: int, fx: Effects) -> None:
    gid = cmd.group_id
    if gid and not state.loading and gid not in state.groups:
        consumer_group = state.consumer.groups.get(gid)
        if consumer_group is not None and consumer_group.members:
            classic_in_consumer.sync(state, reply_to, cmd, now_ms, fx)
            return
    error = _error(state, cmd)
    if error is not None:
        fx.replies.append((reply_to, SyncGroupResult(error)))
        return
    group = state.groups[cmd.group_id]
    member = group.members[cmd.member_id]
    if group.state is GroupState.STABLE:
        _synced(group, member.member_id)
        result = SyncGroupResult(
            E.none, group.protocol_type, group.protocol_name, member.assignment
        )
        fx.replies.append((reply_to, result))
        return
    # CompletingRebalance: park until the leader's assignment is durable.
    if member.sync_reply_to is not None:
        # Kafka silently replaces the parked SyncGroup; we answer it (core.rebalance's docstring).
        fx.replies.append((member.sync_reply_to, SyncGroupResult(E.rebalance_in_progress)))
    member.sync_reply_to = reply_to
    _synced(group, member.member_id)
    if not group.is_leader(member.member_id):
        return
    assignments = {a.member_id: a.assignment for a in cmd.assignments}
    for m in group.members.values():
        m.assignment = assignments.get(m.member_id, b"")
    # The runtime releases these replies only after the snapshot below is durable, which is
    # Kafka's "Stable once the record is committed".
    fx.records.append(group_record(state, group, now_ms))
    answer_syncs(state, group, E.none, now_ms, fx)
    group.transition_to(GroupState.STABLE, state.wall(now_ms))
    rebalance_completed(group, now_ms, fx)


def _error(state: CoreState, cmd: SyncGroup) -> ErrorCode | None:
    if not cmd.group_id:
        return E.invalid_group_id
    if state.loading:
        return E.coordinator_load_in_progress
    group = state.groups.get(cmd.group_id)
    if group is None:
        return E.unknown_member_id
    replies = STATE_REPLIES[group.state]
    error = replies[Check.SYNC]
    if error is not None:
        return error
    invalid = group.validate_member(cmd.member_id, cmd.group_instance_id)
    if invalid is not None:
        return E.fenced_instance_id if invalid else E.unknown_member_id
    if cmd.generation_id != group.generation_id:
        return E.illegal_generation
    if _differs(cmd.protocol_type, group.protocol_type) or _differs(
        cmd.protocol_name, group.protocol_name
    ):
        return E.inconsistent_group_protocol
    return replies[Check.SYNC_MEMBER]


def _synced(group: ClassicGroup, member_id: str) -> None:
    pending = group.pending_sync
    if member_id in pending:
        pending.discard(member_id)
        if not pending:
            group.sync_timer_seq = 0
            pending.clear()  # frees the table a set keeps after its last discard


def _differs(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current

"""The rebalance machinery every classic-group API shares: start a rebalance, end the join phase,
hand out the assignment, remove a member, and the timers that drive them.

Kafka's `GroupMetadataManager` classic-group paths (docs/protocol.md §4-§9), pure and synchronous:
each function takes the core's state (`core.state.CoreState`) and appends to the Effects it is
given. The request handlers (`core.handlers`) and the timers (`core.expiry`) call these.

Invariants:
- Every parked request (a member's `join_reply_to` / `sync_reply_to`) is answered exactly once:
  by the join/sync completion, by a rebalance (27), by removal of the member, by fencing (82) or,
  where Kafka silently drops a parked request because a newer one from the same member replaced
  it, with REBALANCE_IN_PROGRESS -- the runtime needs every reply_to answered, and every client
  treats 27 on JoinGroup/SyncGroup as "rejoin" (Java's joinGroupIfNeeded retries on it).
- State changes are applied at once; the records describing them go in the same Effects, so the
  runtime releases the replies only once the records are durable (Kafka's CoordinatorResult).
"""

from __future__ import annotations

from coordinator.core.effects import Effects
from coordinator.core.events import (
    NO_TRIGGER,
    JoinPhaseCompleted,
    LeaveReason,
    MemberLeft,
    RebalanceCause,
    RebalanceCompleted,
    RebalanceStarted,
    RebalanceTrigger,
)
from coordinator.core.group import ClassicGroup, GroupState, Member, PendingMember
from coordinator.core.messages import (
    ErrorCode,
    JoinGroupMember,
    JoinGroupResult,
    SyncGroupResult,
)
from coordinator.core.records import GroupMetadataKey, GroupMetadataValue, MemberMetadata, Record
from coordinator.core.state import CoreState
from coordinator.core.timers import JOIN, JOIN_INITIAL, earliest_session

E = ErrorCode
_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_STABLE = GroupState.STABLE
_EMPTY = GroupState.EMPTY
_DEAD = GroupState.DEAD
# A rebalance that a member starts by rejoining, within this long of a subscribed topic's
# deletion, is the members' answer to it (TOPIC_DELETED). 5 minutes: metadata.max.age.ms's
# default, by when every client has re-read its metadata by itself.
TOPIC_DELETED_LABEL_MS = 300_000
_REJOIN_CAUSES = frozenset({RebalanceCause.PROTOCOL_CHANGED, RebalanceCause.LEADER_REJOINED})


def group_record(state: CoreState, group: ClassicGroup, now_ms: int) -> Record:
    """A full GroupMetadata snapshot (docs/protocol.md §12.2)."""
    name = group.protocol_name
    members = tuple(
        MemberMetadata(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            m.metadata(name),
            m.assignment,
        )
        for m in group.members.values()
    )
    ts = group.state_timestamp_ms
    value = GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation_id=group.generation_id,
        protocol_name=name,
        leader=group.leader_id,
        current_state_timestamp_ms=state.wall(now_ms) if ts is None else ts,
        members=members,
        metadata_hash=group.metadata_hash,
    )
    return Record(GroupMetadataKey(group.group_id), value)


def join_error(reply_to: int, error: ErrorCode, member_id: str, fx: Effects) -> None:
    fx.replies.append((reply_to, JoinGroupResult(error, member_id=member_id)))


def join_result(
    group: ClassicGroup, member_id: str, members: tuple[JoinGroupMember, ...]
) -> JoinGroupResult:
    """The JoinGroup answer of the group's current generation; `members` for the leader only."""
    return JoinGroupResult(
        E.none,
        group.generation_id,
        group.protocol_type,
        group.protocol_name,
        group.leader_id or "",
        False,
        member_id,
        members,
    )


def drop_member(group: ClassicGroup, member: Member, reason: LeaveReason, fx: Effects) -> None:
    """Remove a member: answer its parked requests, pick a new leader."""
    if member.join_reply_to is not None:
        join_error(member.join_reply_to, E.unknown_member_id, "", fx)
    if member.sync_reply_to is not None:
        # Kafka leaves such a future to time out; we must answer every reply_to.
        fx.replies.append((member.sync_reply_to, SyncGroupResult(E.unknown_member_id)))
        # Equivalent under mutation, here and below: nothing reads a removed member again.
        member.sync_reply_to = None  # pragma: no mutate
    group.remove(member.member_id)
    member.join_reply_to = None  # pragma: no mutate
    fx.events.append(
        MemberLeft(
            group.group_id,
            member.member_id,
            member.group_instance_id,
            reason,
            member.client_id,
            member.client_host,
        )
    )


def member_trigger(member: Member) -> RebalanceTrigger:
    """The member as the trigger of a rebalance (its join, leave, rejoin or expiry)."""
    return RebalanceTrigger(
        member.member_id, member.group_instance_id, member.client_id, member.client_host
    )


def answer_syncs(
    state: CoreState, group: ClassicGroup, error: ErrorCode, now_ms: int, fx: Effects
) -> None:
    """Kafka's propagateAssignment: answer every parked SyncGroup, then restart its session."""
    ok = error is E.none
    ptype = group.protocol_type if ok else None
    pname = group.protocol_name if ok else None
    schedule = state.timers.schedule_session
    for m in group.members.values():
        if m.sync_reply_to is not None:
            fx.replies.append((m.sync_reply_to, SyncGroupResult(error, ptype, pname, m.assignment)))
            m.sync_reply_to = None
            schedule(group, m, m.session_timeout_ms, now_ms)


# -- the join phase ------------------------------------------------------------------------------


def prepare_rebalance(
    state: CoreState,
    group: ClassicGroup,
    cause: RebalanceCause,
    trigger: RebalanceTrigger | None,
    now_ms: int,
    fx: Effects,
) -> None:
    """Enter PreparingRebalance. `trigger`: who or what started it (None: nothing to name)."""
    if group.state is _COMPLETING:
        for m in group.members.values():
            m.assignment = b""
        answer_syncs(state, group, E.rebalance_in_progress, now_ms, fx)
    group.sync_timer_seq = 0
    group.pending_sync.clear()
    deleted_ms = group.topic_deleted_ms
    if deleted_ms is not None:
        group.topic_deleted_ms = None
        if cause in _REJOIN_CAUSES and now_ms - deleted_ms <= TOPIC_DELETED_LABEL_MS:
            cause = RebalanceCause.TOPIC_DELETED  # the members noticed the deletion
    if trigger is None:
        trigger = NO_TRIGGER
    group.rebalance_cause = cause
    group.rebalance_member = trigger
    group.rebalance_started_ms = now_ms
    fx.events.append(RebalanceStarted(group.group_id, cause, trigger.member_id, now_ms, trigger))
    initial = group.state is _EMPTY
    group.transition_to(_PREPARING, state.wall(now_ms))
    if initial:
        delay = state.config.initial_rebalance_delay_ms
        group.initial_delay_ms = delay
        group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
        state.timers.schedule_join(group, delay, now_ms, JOIN_INITIAL)
    elif group.all_joined():
        complete_join(state, group, now_ms, fx)
    else:
        state.timers.schedule_join(group, group.rebalance_timeout_ms(), now_ms, JOIN)


def initial_delay_elapsed(state: CoreState, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
    remaining = group.initial_remaining_ms
    if group.new_member_added and remaining != 0:
        group.new_member_added = False
        delay = min(state.config.initial_rebalance_delay_ms, remaining)
        group.initial_remaining_ms = max(remaining - group.initial_delay_ms, 0)
        group.initial_delay_ms = delay
        state.timers.schedule_join(group, delay, now_ms, JOIN_INITIAL)
    else:
        complete_join(state, group, now_ms, fx)


def maybe_complete_join(state: CoreState, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
    """Complete at once when all joined, except during the initial rebalance (§5.5)."""
    if group.state is _PREPARING and group.all_joined() and group.previous_state is not _EMPTY:
        complete_join(state, group, now_ms, fx)


def _elect_joined_leader(group: ClassicGroup) -> bool:
    if group.leader_id is None:
        return False
    if group.members[group.leader_id].join_reply_to is not None:
        return True
    for m in group.members.values():
        if m.join_reply_to is not None:
            group.leader_id = m.member_id
            return True
    return False


def complete_join(state: CoreState, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
    group.join_timer_seq = 0
    if group.state is not _PREPARING:
        return
    for m in list(group.members.values()):
        if m.join_reply_to is None and m.group_instance_id is None:
            drop_member(group, m, LeaveReason.NOT_REJOINED, fx)
    timers = state.timers
    if not _elect_joined_leader(group) and group.members:
        # Only static members that have not rejoined are left: wait for them (or their expiry).
        timers.schedule_join(group, group.rebalance_timeout_ms(), now_ms, JOIN)
        return
    group.generation_id += 1
    wall = state.wall(now_ms)
    group.pending_sync.clear()
    if not group.members:
        group.protocol_name = None
        state.topic_hashes.track_generation(group)  # §10.5 topics, KIP-1101 hash
        group.transition_to(_EMPTY, wall)
        group.join_completed_ms = now_ms
        fx.records.append(group_record(state, group, now_ms))
        fx.events.append(
            JoinPhaseCompleted(
                group.group_id, group.generation_id, None, 0, group.rebalance_started_ms, now_ms
            )
        )
        rebalance_completed(group, now_ms, fx)
        return
    group.protocol_name = group.select_protocol()
    state.topic_hashes.track_generation(group)  # §10.5 topics, KIP-1101 hash
    group.transition_to(_COMPLETING, wall)
    group.join_completed_ms = now_ms
    fx.events.append(
        JoinPhaseCompleted(
            group.group_id,
            group.generation_id,
            group.protocol_name,
            len(group.members),
            group.rebalance_started_ms,
            now_ms,
        )
    )
    leader_members = group.join_members()
    for m in group.members.values():
        if m.join_reply_to is not None:
            is_leader = m.member_id == group.leader_id
            result = join_result(group, m.member_id, leader_members if is_leader else ())
            fx.replies.append((m.join_reply_to, result))
            group.park_join(m, None, 0)
        timers.schedule_session(group, m, m.session_timeout_ms, now_ms)
        m.is_new = False
        group.pending_sync.add(m.member_id)
    timers.schedule_sync(group, now_ms)


def rebalance_completed(group: ClassicGroup, now_ms: int, fx: Effects) -> None:
    fx.events.append(
        RebalanceCompleted(
            group.group_id,
            group.generation_id,
            group.protocol_name,
            group.leader_id,
            len(group.members),
            group.rebalance_cause,
            group.rebalance_started_ms,
            group.join_completed_ms,
            now_ms,
            group.rebalance_member,
        )
    )


# -- timer expiry --------------------------------------------------------------------------------


def expire_sessions(state: CoreState, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
    """The group's session entry is due: expire each member whose deadline has passed, the
    earliest first (ties in join order), then arm the entry for the next deadline. Each one
    is checked again just before: an expiry before it may have moved it on (a completed join
    restarts every session) or removed it."""
    group.session_timer_seq = 0
    if group.state is _DEAD:
        return  # nobody expires in a dead group; re-arming a due entry would spin `expire`
    owners: list[Member | PendingMember] = [
        *group.members.values(),
        *group.pending_members.values(),
    ]
    due = sorted(
        (owner.deadline_ms, i, owner.member_id)
        for i, owner in enumerate(owners)
        if 0 < owner.deadline_ms <= now_ms
    )
    for _, _, member_id in due:
        owner = group.members.get(member_id) or group.pending_members.get(member_id)
        if owner is not None and 0 < owner.deadline_ms <= now_ms:
            _expire_session(state, group, member_id, now_ms, fx)
    earliest = earliest_session(group)
    if earliest and (group.session_timer_seq == 0 or earliest < group.session_timer_at):
        state.timers.arm_sessions(group, earliest)


def _expire_session(
    state: CoreState, group: ClassicGroup, member_id: str, now_ms: int, fx: Effects
) -> None:
    if group.state is _DEAD:
        return
    pending = group.pending_members.pop(member_id, None)
    if pending is not None:
        if group.state is _PREPARING and group.all_joined():
            complete_join(state, group, now_ms, fx)
        return
    member = group.members[member_id]
    if not member.is_new and (member.join_reply_to is not None or member.sync_reply_to is not None):
        member.deadline_ms = 0  # protected while its request is parked; re-armed on answer
        return
    drop_member(group, member, LeaveReason.EXPIRED, fx)
    if group.state in (_STABLE, _COMPLETING):
        trigger = member_trigger(member)
        prepare_rebalance(state, group, RebalanceCause.SESSION_EXPIRED, trigger, now_ms, fx)
    elif group.state is _PREPARING and group.all_joined():
        complete_join(state, group, now_ms, fx)


def expire_pending_sync(state: CoreState, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
    group.sync_timer_seq = 0
    if group.sync_timer_generation != group.generation_id:
        return
    # Defensive, so equivalent under mutation: a live sync timer implies both (a rebalance
    # cancels it and clears pending_sync, the last SyncGroup cancels it).
    if group.state not in (_COMPLETING, _STABLE) or not group.pending_sync:  # pragma: no mutate
        return
    # The trigger: the first member (in join order) that never sent SyncGroup.
    trigger: RebalanceTrigger | None = None
    for member_id in [m for m in group.members if m in group.pending_sync]:
        member = group.members[member_id]
        trigger = trigger or member_trigger(member)
        drop_member(group, member, LeaveReason.SYNC_EXPIRED, fx)
    prepare_rebalance(state, group, RebalanceCause.SYNC_EXPIRED, trigger, now_ms, fx)

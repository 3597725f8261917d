"""JoinGroup v0-v9 (docs/protocol.md §5).

Rules: an empty group id -> INVALID_GROUP_ID; a session timeout outside the broker's bounds ->
INVALID_SESSION_TIMEOUT; loading -> COORDINATOR_LOAD_IN_PROGRESS; group.max.size admission
(§5.2); v4+ new members get MEMBER_ID_REQUIRED and an id to come back with (KIP-394); static
members (KIP-345, §5.6) replace their old member id, without a rebalance when nothing else
changed; a known member's rejoin is parked until the join phase ends (core.rebalance), or answered
at once when it repeats a join of the current generation. A new group is made durable at once.
A KIP-848 consumer group's id: while it has members the JoinGroup joins it as a classic member
(core.handlers.classic_in_consumer, issue 23 item 6); an Empty one is deleted and the classic
group takes its place (core.handlers.consumer).
"""

from __future__ import annotations

from coordinator.core.effects import Effects
from coordinator.core.events import (
    GroupCreated,
    LeaveReason,
    MemberJoined,
    MemberLeft,
    RebalanceCause,
)
from coordinator.core.group import (
    STATE_REPLIES,
    Check,
    ClassicGroup,
    GroupState,
    Member,
    PendingMember,
)
from coordinator.core.handlers import classic_in_consumer
from coordinator.core.messages import ErrorCode, JoinGroup, JoinGroupResult, SyncGroupResult
from coordinator.core.rebalance import (
    drop_member,
    group_record,
    join_error,
    join_result,
    maybe_complete_join,
    member_trigger,
    prepare_rebalance,
)
from coordinator.core.records import GroupMetadataKey, GroupMetadataValue, Record
from coordinator.core.state import CoreState

E = ErrorCode
S = GroupState


def handle(state: CoreState, reply_to: int, cmd: JoinGroup, now_ms: int, fx: Effects) -> None:
    if not cmd.group_id:
        return join_error(reply_to, E.invalid_group_id, cmd.member_id, fx)
    timeout = cmd.session_timeout_ms
    config = state.config
    if not config.session_timeout_min_ms <= timeout <= config.session_timeout_max_ms:
        return join_error(reply_to, E.invalid_session_timeout, cmd.member_id, fx)
    if state.loading:
        return join_error(reply_to, E.coordinator_load_in_progress, cmd.member_id, fx)
    if cmd.group_id in state.share.groups:
        # A share group's id (KIP-932): its protocol is not the member's. Kafka refuses a new
        # member whose protocol the group does not support the same way; not checked against
        # a share group on Kafka.
        return join_error(reply_to, E.inconsistent_group_protocol, cmd.member_id, fx)
    consumer_group = state.consumer.groups.get(cmd.group_id)
    if consumer_group is not None:  # a KIP-848 group (issue 23)
        if consumer_group.members:
            # A classic member of a consumer group (Kafka's classicGroupJoinToConsumerGroup).
            return classic_in_consumer.join(state, reply_to, cmd, now_ms, fx)
        # An Empty consumer group becomes a classic group (Kafka 4.x); its offsets stay.
        _, records = state.consumer.delete_group(cmd.group_id)
        fx.records.extend(Record(r.key, r.value) for r in records)
    group = state.groups.get(cmd.group_id)
    created = False
    if group is None:
        if cmd.member_id:
            return join_error(reply_to, E.unknown_member_id, cmd.member_id, fx)
        group = ClassicGroup(cmd.group_id, state.wall(now_ms))
        state.groups[cmd.group_id] = group
        created = True
        fx.events.append(GroupCreated(cmd.group_id))
    records_before = len(fx.records)
    if not _admit(state, group, cmd.member_id):
        member = group.members.get(cmd.member_id)
        if member is not None:
            drop_member(group, member, LeaveReason.MAX_SIZE, fx)
        else:
            # Kafka keeps such a pending id until its timer fires; it could never be admitted
            # while the group is full, so we let it go at once.
            group.pending_members.pop(cmd.member_id, None)
        join_error(reply_to, E.group_max_size_reached, "", fx)
    elif not cmd.member_id:
        _join_new(state, reply_to, group, cmd, now_ms, fx)
    else:
        _join_existing(state, reply_to, group, cmd, now_ms, fx)
    if created and len(fx.records) == records_before:
        # Make the new group durable (§5.2 step 4): generation 0, no type, no members.
        value = GroupMetadataValue("", 0, None, None, state.wall(now_ms), ())
        fx.records.append(Record(GroupMetadataKey(cmd.group_id), value))
    return None


def _admit(state: CoreState, group: ClassicGroup, member_id: str) -> bool:
    """group.max.size admission (§5.2 step 3)."""
    limit = state.config.max_group_size
    group_state = group.state
    if group_state is S.EMPTY or group_state is S.DEAD:
        return True
    member = group.members.get(member_id)
    if group_state is S.PREPARING_REBALANCE:
        awaiting = member is not None and member.join_reply_to is not None
        return awaiting or group.num_awaiting_join < limit
    return member is not None or len(group.members) < limit


def _join_new(
    state: CoreState, reply_to: int, group: ClassicGroup, cmd: JoinGroup, now_ms: int, fx: Effects
) -> None:
    error = STATE_REPLIES[group.state][Check.JOIN]
    if error is not None:
        return join_error(reply_to, error, "", fx)
    if not group.supports_protocols(cmd.protocol_type, tuple(p.name for p in cmd.protocols)):
        return join_error(reply_to, E.inconsistent_group_protocol, "", fx)
    instance_id = cmd.group_instance_id
    member_id = state.new_member_id(instance_id if instance_id is not None else cmd.client_id)
    if instance_id is not None:
        old_id = group.static_members.get(instance_id)
        if old_id is not None:
            return _replace_static(
                state,
                reply_to,
                group=group,
                cmd=cmd,
                old_id=old_id,
                new_id=member_id,
                now_ms=now_ms,
                fx=fx,
            )
    elif cmd.api_version >= 4:
        # KIP-394: hand out the id and wait for the member to come back with it.
        pending = PendingMember(member_id)
        group.pending_members[member_id] = pending
        state.timers.schedule_session(group, pending, cmd.session_timeout_ms, now_ms)
        return join_error(reply_to, E.member_id_required, member_id, fx)
    return _add_member(
        state, reply_to, group=group, cmd=cmd, member_id=member_id, now_ms=now_ms, fx=fx
    )


def _add_member(
    state: CoreState,
    reply_to: int,
    *,
    group: ClassicGroup,
    cmd: JoinGroup,
    member_id: str,
    now_ms: int,
    fx: Effects,
) -> None:
    member = Member(
        member_id,
        cmd.group_instance_id,
        client_id=cmd.client_id,
        client_host=cmd.client_host,
        rebalance_timeout_ms=cmd.rebalance_timeout_ms,
        session_timeout_ms=cmd.session_timeout_ms,
        protocol_type=cmd.protocol_type,
        protocols=cmd.protocols,
    )
    member.is_new = True
    if group.state is S.PREPARING_REBALANCE and group.previous_state is S.EMPTY:
        group.new_member_added = True
    member.join_reply_to = reply_to
    member.join_version = cmd.api_version
    if group.pending_members.pop(member_id, None) is not None and not group.pending_members:
        group.pending_members.clear()  # frees the table a dict keeps after its last pop
    group.add(member)
    state.timers.schedule_session(group, member, state.config.new_member_join_timeout_ms, now_ms)
    fx.events.append(
        MemberJoined(
            group.group_id, member_id, cmd.group_instance_id, cmd.client_id, cmd.client_host
        )
    )
    if group.state is S.PREPARING_REBALANCE:
        maybe_complete_join(state, group, now_ms, fx)
    else:
        prepare_rebalance(
            state, group, RebalanceCause.MEMBER_JOINED, member_trigger(member), now_ms, fx
        )


def _update_member(
    reply_to: int, group: ClassicGroup, member: Member, cmd: JoinGroup, fx: Effects
) -> None:
    group.update_protocols(member, cmd.protocols)
    member.rebalance_timeout_ms = cmd.rebalance_timeout_ms
    member.session_timeout_ms = cmd.session_timeout_ms
    if member.join_reply_to is not None:
        # Kafka silently replaces the parked JoinGroup; we answer it (core.rebalance's docstring).
        join_error(member.join_reply_to, E.rebalance_in_progress, member.member_id, fx)
    group.park_join(member, reply_to, cmd.api_version)


def _join_existing(
    state: CoreState, reply_to: int, group: ClassicGroup, cmd: JoinGroup, now_ms: int, fx: Effects
) -> None:
    member_id = cmd.member_id
    # Unreachable, so equivalent under mutation: this coordinator never unloads a group.
    error = STATE_REPLIES[group.state][Check.JOIN]  # pragma: no mutate
    if error is not None:  # pragma: no mutate block
        return join_error(reply_to, error, member_id, fx)
    if not group.supports_protocols(cmd.protocol_type, tuple(p.name for p in cmd.protocols)):
        return join_error(reply_to, E.inconsistent_group_protocol, member_id, fx)
    pending = group.pending_members.get(member_id)
    if pending is not None:
        if cmd.group_instance_id is not None:
            # Kafka asserts this never happens (IllegalStateException -> UNKNOWN_SERVER_ERROR).
            return join_error(reply_to, E.unknown_server_error, member_id, fx)
        member_id = pending.member_id  # the id we generated: one copy, not the request's too
        return _add_member(
            state, reply_to, group=group, cmd=cmd, member_id=member_id, now_ms=now_ms, fx=fx
        )
    invalid = group.validate_member(member_id, cmd.group_instance_id)
    if invalid is not None:
        error = E.fenced_instance_id if invalid else E.unknown_member_id
        return join_error(reply_to, error, member_id, fx)
    member = group.members[member_id]
    group_state = group.state
    if group_state is S.PREPARING_REBALANCE:
        _update_member(reply_to, group, member, cmd, fx)
        return maybe_complete_join(state, group, now_ms, fx)
    # An Empty group has no members, so validate_member has answered UNKNOWN_MEMBER_ID above.
    is_leader = group.is_leader(member_id)
    same = member.matches(cmd.protocols)
    if same and (group_state is S.COMPLETING_REBALANCE or not is_leader):
        # A repeated JoinGroup (e.g. a lost reply): the current generation, no rebalance.
        result = join_result(group, member_id, group.join_members() if is_leader else ())
        fx.replies.append((reply_to, result))
        return None
    _update_member(reply_to, group, member, cmd, fx)
    cause = RebalanceCause.PROTOCOL_CHANGED if not same else RebalanceCause.LEADER_REJOINED
    return prepare_rebalance(state, group, cause, member_trigger(member), now_ms, fx)


def _replace_static(
    state: CoreState,
    reply_to: int,
    *,
    group: ClassicGroup,
    cmd: JoinGroup,
    old_id: str,
    new_id: str,
    now_ms: int,
    fx: Effects,
) -> None:
    """KIP-345 (§5.6): fence the old member id and continue under the new one."""
    old = group.members[old_id]
    old_leader = group.leader_id
    if old.join_reply_to is not None:
        join_error(old.join_reply_to, E.fenced_instance_id, old_id, fx)
    if old.sync_reply_to is not None:
        fx.replies.append((old.sync_reply_to, SyncGroupResult(E.fenced_instance_id)))
    member = group.replace_static(old, new_id)
    # Equivalent under mutation: `old` is out of the group from here on and nothing reads it
    # again; clearing its answered requests only drops the references.
    old.join_reply_to = old.sync_reply_to = None  # pragma: no mutate
    fx.events.append(
        MemberLeft(
            group.group_id,
            old_id,
            old.group_instance_id,
            LeaveReason.FENCED,
            old.client_id,
            old.client_host,
        )
    )
    fx.events.append(
        MemberJoined(group.group_id, new_id, old.group_instance_id, old.client_id, old.client_host)
    )
    state.timers.schedule_session(group, member, member.session_timeout_ms, now_ms)
    # Equivalent under mutation (fx): the fresh member has no parked JoinGroup to answer.
    _update_member(reply_to, group, member, cmd, fx)  # pragma: no mutate
    group_state = group.state
    if group_state is S.STABLE:
        if group.select_protocol() == group.protocol_name:
            # No rebalance: persist the new id with the current assignments, then answer.
            # Equivalent under mutation (now_ms): a Stable group has its state timestamp.
            fx.records.append(group_record(state, group, now_ms))  # pragma: no mutate
            is_leader = group.is_leader(new_id)
            skip = cmd.api_version >= 9
            result = JoinGroupResult(
                E.none,
                group.generation_id,
                group.protocol_type,
                group.protocol_name,
                # Equivalent under mutation (the ""): a Stable group always has a leader.
                (group.leader_id if skip else old_leader) or "",  # pragma: no mutate
                skip and is_leader,
                new_id,
                group.join_members() if skip and is_leader else (),
            )
            fx.replies.append((reply_to, result))
            # Equivalent under mutation (the 0): nothing reads join_version.
            group.park_join(member, None, 0)  # pragma: no mutate
            return None
        return prepare_rebalance(
            state, group, RebalanceCause.STATIC_MEMBER_REPLACED, member_trigger(member), now_ms, fx
        )
    if group_state is S.COMPLETING_REBALANCE:
        return prepare_rebalance(
            state, group, RebalanceCause.STATIC_MEMBER_REPLACED, member_trigger(member), now_ms, fx
        )
    return maybe_complete_join(state, group, now_ms, fx)

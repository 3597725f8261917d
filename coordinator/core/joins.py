"""The classic rebalance protocol: JoinGroup, SyncGroup, Heartbeat, LeaveGroup and their timers.

Kafka's `GroupMetadataManager` classic-group paths (docs/protocol.md §4-§9), pure and synchronous.
`GroupMachine` is the base of `core.coordinator.GroupCoordinator`; every handler appends to the
Effects it is given.

Invariants:
- Every parked request (a member's `join_reply_to` / `sync_reply_to`) is answered exactly once:
  by the join/sync completion, by a rebalance (27), by removal of the member, by fencing (82) or,
  where Kafka silently drops a parked request because a newer one from the same member replaced
  it, with REBALANCE_IN_PROGRESS -- the runtime needs every reply_to answered, and every client
  treats 27 on JoinGroup/SyncGroup as "rejoin" (Java's joinGroupIfNeeded retries on it).
- Timers: core.timers (one heap, lazy deletion, purged); `_fire` runs the one that is due.
- State changes are applied at once; the records describing them go in the same Effects, so the
  runtime releases the replies only once the records are durable (Kafka's CoordinatorResult).
"""

from __future__ import annotations

from coordinator.core.effects import CoordinatorConfig, Effects, MemberIdFactory
from coordinator.core.events import (
    GroupCreated,
    JoinPhaseCompleted,
    LeaveReason,
    MemberJoined,
    MemberLeft,
    RebalanceCause,
    RebalanceCompleted,
    RebalanceStarted,
)
from coordinator.core.group import ClassicGroup, GroupState, Member, PendingMember
from coordinator.core.messages import (
    ErrorCode,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeftMember,
    SyncGroup,
    SyncGroupResult,
)
from coordinator.core.records import GroupMetadataKey, GroupMetadataValue, MemberMetadata, Record
from coordinator.core.timers import (
    JOIN,
    JOIN_INITIAL,
    RETENTION,
    SESSION,
    GroupTimers,
    TimerEntry,
    earliest_session,
)
from coordinator.core.topichash import TopicHashCache
from coordinator.core.topics import TopicCatalog

E = ErrorCode
_HB = {code: HeartbeatResult(code) for code in ErrorCode}
_HB_NONE = _HB[E.none]
_HB_REBALANCING = _HB[E.rebalance_in_progress]
_HB_UNKNOWN = _HB[E.unknown_member_id]
_HB_ILLEGAL = _HB[E.illegal_generation]
_HB_FENCED = _HB[E.fenced_instance_id]
_STABLE = GroupState.STABLE
_PREPARING = GroupState.PREPARING_REBALANCE
_COMPLETING = GroupState.COMPLETING_REBALANCE
_EMPTY = GroupState.EMPTY
_DEAD = GroupState.DEAD
# A rebalance that a member starts by rejoining, within this long of a subscribed topic's
# deletion, is the members' answer to it (TOPIC_DELETED). 5 minutes: metadata.max.age.ms's
# default, by when every client has re-read its metadata by itself.
TOPIC_DELETED_LABEL_MS = 300_000
_REJOIN_CAUSES = frozenset({RebalanceCause.PROTOCOL_CHANGED, RebalanceCause.LEADER_REJOINED})


class GroupMachine(GroupTimers):
    """Groups, timers and the rebalance protocol. `GroupCoordinator` adds offsets and admin APIs."""

    def __init__(
        self,
        config: CoordinatorConfig,
        topics: TopicCatalog,
        new_member_id: MemberIdFactory,
        epoch_offset_ms: int = 0,
    ) -> None:
        self.config = config
        self.topics = topics
        self._new_member_id = new_member_id
        self._epoch_offset_ms = epoch_offset_ms
        self._groups: dict[str, ClassicGroup] = {}
        GroupTimers.__init__(self)
        self._retention_seq = 0
        self.loading = False
        self.topic_hashes = TopicHashCache(topics, config.topic_hash)  # KIP-1101

    # -- timers (core.timers) -------------------------------------------------------------

    def _fire(self, entry: TimerEntry, now_ms: int, fx: Effects) -> None:
        kind = entry[2]
        group = self._groups.get(entry[3])
        if kind == RETENTION or group is None:
            return
        if kind == SESSION:
            self._expire_sessions(group, now_ms, fx)
        elif kind == JOIN:
            self._complete_join(group, now_ms, fx)
        elif kind == JOIN_INITIAL:
            self._initial_delay_elapsed(group, now_ms, fx)
        else:
            group.sync_timer_seq = 0
            self._expire_pending_sync(group, now_ms, fx)

    # -- helpers ---------------------------------------------------------------------------------

    def _wall(self, now_ms: int) -> int:
        return now_ms + self._epoch_offset_ms

    def group_record(self, group: ClassicGroup, now_ms: int) -> Record:
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
            current_state_timestamp_ms=self._wall(now_ms) if ts is None else ts,
            members=members,
            metadata_hash=group.metadata_hash,
        )
        return Record(GroupMetadataKey(group.group_id), value)

    @staticmethod
    def _join_error(reply_to: int, error: ErrorCode, member_id: str, fx: Effects) -> None:
        fx.replies.append((reply_to, JoinGroupResult(error, member_id=member_id)))

    def _drop_member(
        self, group: ClassicGroup, member: Member, reason: LeaveReason, fx: Effects
    ) -> None:
        """Remove a member: answer its parked requests, pick a new leader."""
        if member.join_reply_to is not None:
            self._join_error(member.join_reply_to, E.unknown_member_id, "", fx)
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

    def _answer_syncs(
        self, group: ClassicGroup, error: ErrorCode, now_ms: int, fx: Effects
    ) -> None:
        """Kafka's propagateAssignment: answer every parked SyncGroup, then restart its session."""
        ok = error is E.none
        ptype = group.protocol_type if ok else None
        pname = group.protocol_name if ok else None
        for m in group.members.values():
            if m.sync_reply_to is not None:
                fx.replies.append(
                    (m.sync_reply_to, SyncGroupResult(error, ptype, pname, m.assignment))
                )
                m.sync_reply_to = None
                self._schedule_session(group, m, m.session_timeout_ms, now_ms)

    # -- rebalance -------------------------------------------------------------------------------

    def _prepare_rebalance(
        self,
        group: ClassicGroup,
        cause: RebalanceCause,
        member_id: str | None,
        now_ms: int,
        fx: Effects,
    ) -> None:
        if group.state is _COMPLETING:
            for m in group.members.values():
                m.assignment = b""
            self._answer_syncs(group, E.rebalance_in_progress, now_ms, fx)
        group.sync_timer_seq = 0
        group.pending_sync.clear()
        deleted_ms = group.topic_deleted_ms
        if deleted_ms is not None:
            group.topic_deleted_ms = None
            if cause in _REJOIN_CAUSES and now_ms - deleted_ms <= TOPIC_DELETED_LABEL_MS:
                cause = RebalanceCause.TOPIC_DELETED  # the members noticed the deletion
        group.rebalance_cause = cause
        group.rebalance_member = member_id
        group.rebalance_started_ms = now_ms
        fx.events.append(RebalanceStarted(group.group_id, cause, member_id, now_ms))
        initial = group.state is _EMPTY
        group.transition_to(_PREPARING, self._wall(now_ms))
        if initial:
            delay = self.config.initial_rebalance_delay_ms
            group.initial_delay_ms = delay
            group.initial_remaining_ms = max(group.rebalance_timeout_ms() - delay, 0)
            self._schedule_join(group, delay, now_ms, JOIN_INITIAL)
        elif group.all_joined():
            self._complete_join(group, now_ms, fx)
        else:
            self._schedule_join(group, group.rebalance_timeout_ms(), now_ms, JOIN)

    def _initial_delay_elapsed(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        remaining = group.initial_remaining_ms
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, remaining)
            group.initial_remaining_ms = max(remaining - group.initial_delay_ms, 0)
            group.initial_delay_ms = delay
            self._schedule_join(group, delay, now_ms, JOIN_INITIAL)
        else:
            self._complete_join(group, now_ms, fx)

    def _maybe_complete_join(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        """Complete at once when all joined, except during the initial rebalance (§5.5)."""
        if group.state is _PREPARING and group.all_joined() and group.previous_state is not _EMPTY:
            self._complete_join(group, now_ms, fx)

    def _elect_joined_leader(self, group: ClassicGroup) -> bool:
        if group.leader_id is None:
            return False
        if group.members[group.leader_id].join_reply_to is not None:
            return True
        for m in group.members.values():
            if m.join_reply_to is not None:
                group.leader_id = m.member_id
                return True
        return False

    def _complete_join(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        group.join_timer_seq = 0
        if group.state is not _PREPARING:
            return
        for m in list(group.members.values()):
            if m.join_reply_to is None and m.group_instance_id is None:
                self._drop_member(group, m, LeaveReason.NOT_REJOINED, fx)
        if not self._elect_joined_leader(group) and group.members:
            # Only static members that have not rejoined are left: wait for them (or their expiry).
            self._schedule_join(group, group.rebalance_timeout_ms(), now_ms, JOIN)
            return
        group.generation_id += 1
        wall = self._wall(now_ms)
        group.pending_sync.clear()
        if not group.members:
            group.protocol_name = None
            self.topic_hashes.track_generation(group)  # §10.5 topics, KIP-1101 hash
            group.transition_to(_EMPTY, wall)
            group.join_completed_ms = now_ms
            fx.records.append(self.group_record(group, now_ms))
            fx.events.append(
                JoinPhaseCompleted(
                    group.group_id, group.generation_id, None, 0, group.rebalance_started_ms, now_ms
                )
            )
            self._rebalance_completed(group, now_ms, fx)
            return
        group.protocol_name = group.select_protocol()
        self.topic_hashes.track_generation(group)  # §10.5 topics, KIP-1101 hash
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
                result = JoinGroupResult(
                    E.none,
                    group.generation_id,
                    group.protocol_type,
                    group.protocol_name,
                    group.leader_id or "",
                    False,
                    m.member_id,
                    leader_members if is_leader else (),
                )
                fx.replies.append((m.join_reply_to, result))
                group.park_join(m, None, 0)
            self._schedule_session(group, m, m.session_timeout_ms, now_ms)
            m.is_new = False
            group.pending_sync.add(m.member_id)
        self._schedule_sync(group, now_ms)

    def _rebalance_completed(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
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
            )
        )

    # -- JoinGroup -------------------------------------------------------------------------------

    def _join(self, reply_to: int, cmd: JoinGroup, now_ms: int, fx: Effects) -> None:
        if not cmd.group_id:
            return self._join_error(reply_to, E.invalid_group_id, cmd.member_id, fx)
        timeout = cmd.session_timeout_ms
        if not self.config.session_timeout_min_ms <= timeout <= self.config.session_timeout_max_ms:
            return self._join_error(reply_to, E.invalid_session_timeout, cmd.member_id, fx)
        if self.loading:
            return self._join_error(reply_to, E.coordinator_load_in_progress, cmd.member_id, fx)
        group = self._groups.get(cmd.group_id)
        created = False
        if group is None:
            if cmd.member_id:
                return self._join_error(reply_to, E.unknown_member_id, cmd.member_id, fx)
            group = ClassicGroup(cmd.group_id, self._wall(now_ms))
            self._groups[cmd.group_id] = group
            created = True
            fx.events.append(GroupCreated(cmd.group_id))
        records_before = len(fx.records)
        if not self._admit(group, cmd.member_id):
            member = group.members.get(cmd.member_id)
            if member is not None:
                self._drop_member(group, member, LeaveReason.MAX_SIZE, fx)
            else:
                # Kafka keeps such a pending id until its timer fires; it could never be admitted
                # while the group is full, so we let it go at once.
                group.pending_members.pop(cmd.member_id, None)
            self._join_error(reply_to, E.group_max_size_reached, "", fx)
        elif not cmd.member_id:
            self._join_new(reply_to, group, cmd, now_ms, fx)
        else:
            self._join_existing(reply_to, group, cmd, now_ms, fx)
        if created and len(fx.records) == records_before:
            # Make the new group durable (§5.2 step 4): generation 0, no type, no members.
            value = GroupMetadataValue("", 0, None, None, self._wall(now_ms), ())
            fx.records.append(Record(GroupMetadataKey(cmd.group_id), value))
        return None

    def _admit(self, group: ClassicGroup, member_id: str) -> bool:
        """group.max.size admission (§5.2 step 3)."""
        limit = self.config.max_group_size
        state = group.state
        if state is _EMPTY or state is _DEAD:
            return True
        member = group.members.get(member_id)
        if state is _PREPARING:
            awaiting = member is not None and member.join_reply_to is not None
            return awaiting or group.num_awaiting_join < limit
        return member is not None or len(group.members) < limit

    def _join_new(
        self, reply_to: int, group: ClassicGroup, cmd: JoinGroup, now_ms: int, fx: Effects
    ) -> None:
        if group.state is _DEAD:
            return self._join_error(reply_to, E.coordinator_not_available, "", fx)
        if not group.supports_protocols(cmd.protocol_type, tuple(p.name for p in cmd.protocols)):
            return self._join_error(reply_to, E.inconsistent_group_protocol, "", fx)
        instance_id = cmd.group_instance_id
        member_id = self._new_member_id(instance_id if instance_id is not None else cmd.client_id)
        if instance_id is not None:
            old_id = group.static_members.get(instance_id)
            if old_id is not None:
                return self._replace_static(
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
            self._schedule_session(group, pending, cmd.session_timeout_ms, now_ms)
            return self._join_error(reply_to, E.member_id_required, member_id, fx)
        return self._add_member(
            reply_to, group=group, cmd=cmd, member_id=member_id, now_ms=now_ms, fx=fx
        )

    def _add_member(
        self,
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
        if group.state is _PREPARING and group.previous_state is _EMPTY:
            group.new_member_added = True
        member.join_reply_to = reply_to
        member.join_version = cmd.api_version
        if group.pending_members.pop(member_id, None) is not None and not group.pending_members:
            group.pending_members.clear()  # frees the table a dict keeps after its last pop
        group.add(member)
        self._schedule_session(group, member, self.config.new_member_join_timeout_ms, now_ms)
        fx.events.append(
            MemberJoined(
                group.group_id, member_id, cmd.group_instance_id, cmd.client_id, cmd.client_host
            )
        )
        if group.state is _PREPARING:
            self._maybe_complete_join(group, now_ms, fx)
        else:
            self._prepare_rebalance(group, RebalanceCause.MEMBER_JOINED, member_id, now_ms, fx)

    def _update_member(
        self, reply_to: int, group: ClassicGroup, member: Member, cmd: JoinGroup, fx: Effects
    ) -> None:
        group.update_protocols(member, cmd.protocols)
        member.rebalance_timeout_ms = cmd.rebalance_timeout_ms
        member.session_timeout_ms = cmd.session_timeout_ms
        if member.join_reply_to is not None:
            # Kafka silently replaces the parked JoinGroup; we answer it (see module docstring).
            self._join_error(member.join_reply_to, E.rebalance_in_progress, member.member_id, fx)
        group.park_join(member, reply_to, cmd.api_version)

    def _join_existing(
        self, reply_to: int, group: ClassicGroup, cmd: JoinGroup, now_ms: int, fx: Effects
    ) -> None:
        member_id = cmd.member_id
        # Unreachable, so equivalent under mutation: this coordinator never unloads a group.
        if group.state is _DEAD:  # pragma: no mutate block
            return self._join_error(reply_to, E.coordinator_not_available, member_id, fx)
        if not group.supports_protocols(cmd.protocol_type, tuple(p.name for p in cmd.protocols)):
            return self._join_error(reply_to, E.inconsistent_group_protocol, member_id, fx)
        pending = group.pending_members.get(member_id)
        if pending is not None:
            if cmd.group_instance_id is not None:
                # Kafka asserts this never happens (IllegalStateException -> UNKNOWN_SERVER_ERROR).
                return self._join_error(reply_to, E.unknown_server_error, member_id, fx)
            member_id = pending.member_id  # the id we generated: one copy, not the request's too
            return self._add_member(
                reply_to, group=group, cmd=cmd, member_id=member_id, now_ms=now_ms, fx=fx
            )
        invalid = group.validate_member(member_id, cmd.group_instance_id)
        if invalid is not None:
            error = E.fenced_instance_id if invalid else E.unknown_member_id
            return self._join_error(reply_to, error, member_id, fx)
        member = group.members[member_id]
        state = group.state
        if state is _PREPARING:
            self._update_member(reply_to, group, member, cmd, fx)
            return self._maybe_complete_join(group, now_ms, fx)
        # Unreachable, so equivalent under mutation: an Empty group has no members, so
        # validate_member has already answered UNKNOWN_MEMBER_ID above.
        if state is _EMPTY:  # pragma: no mutate block
            return self._join_error(reply_to, E.unknown_member_id, member_id, fx)
        is_leader = group.is_leader(member_id)
        same = member.matches(cmd.protocols)
        if same and (state is _COMPLETING or not is_leader):
            # A repeated JoinGroup (e.g. a lost reply): the current generation, no rebalance.
            result = JoinGroupResult(
                E.none,
                group.generation_id,
                group.protocol_type,
                group.protocol_name,
                group.leader_id or "",
                False,
                member_id,
                group.join_members() if is_leader else (),
            )
            fx.replies.append((reply_to, result))
            return None
        self._update_member(reply_to, group, member, cmd, fx)
        cause = RebalanceCause.PROTOCOL_CHANGED if not same else RebalanceCause.LEADER_REJOINED
        return self._prepare_rebalance(group, cause, member_id, now_ms, fx)

    def _replace_static(
        self,
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
            self._join_error(old.join_reply_to, E.fenced_instance_id, old_id, fx)
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
            MemberJoined(
                group.group_id, new_id, old.group_instance_id, old.client_id, old.client_host
            )
        )
        self._schedule_session(group, member, member.session_timeout_ms, now_ms)
        # Equivalent under mutation (fx): the fresh member has no parked JoinGroup to answer.
        self._update_member(reply_to, group, member, cmd, fx)  # pragma: no mutate
        state = group.state
        if state is _STABLE:
            if group.select_protocol() == group.protocol_name:
                # No rebalance: persist the new id with the current assignments, then answer.
                # Equivalent under mutation (now_ms): a Stable group has its state timestamp.
                fx.records.append(self.group_record(group, now_ms))  # pragma: no mutate
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
            return self._prepare_rebalance(
                group, RebalanceCause.STATIC_MEMBER_REPLACED, new_id, now_ms, fx
            )
        if state is _COMPLETING:
            return self._prepare_rebalance(
                group, RebalanceCause.STATIC_MEMBER_REPLACED, new_id, now_ms, fx
            )
        return self._maybe_complete_join(group, now_ms, fx)

    # -- SyncGroup -------------------------------------------------------------------------------

    def _sync(self, reply_to: int, cmd: SyncGroup, now_ms: int, fx: Effects) -> None:
        error = self._sync_error(cmd)
        if error is not None:
            fx.replies.append((reply_to, SyncGroupResult(error)))
            return
        group = self._groups[cmd.group_id]
        member = group.members[cmd.member_id]
        if group.state is _STABLE:
            self._synced(group, member.member_id)
            result = SyncGroupResult(
                E.none, group.protocol_type, group.protocol_name, member.assignment
            )
            fx.replies.append((reply_to, result))
            return
        # CompletingRebalance: park until the leader's assignment is durable.
        if member.sync_reply_to is not None:
            # Kafka silently replaces the parked SyncGroup; we answer it (module docstring).
            fx.replies.append((member.sync_reply_to, SyncGroupResult(E.rebalance_in_progress)))
        member.sync_reply_to = reply_to
        self._synced(group, member.member_id)
        if not group.is_leader(member.member_id):
            return
        assignments = {a.member_id: a.assignment for a in cmd.assignments}
        for m in group.members.values():
            m.assignment = assignments.get(m.member_id, b"")
        # The runtime releases these replies only after the snapshot below is durable, which is
        # Kafka's "Stable once the record is committed".
        fx.records.append(self.group_record(group, now_ms))
        self._answer_syncs(group, E.none, now_ms, fx)
        group.transition_to(_STABLE, self._wall(now_ms))
        self._rebalance_completed(group, now_ms, fx)

    def _sync_error(self, cmd: SyncGroup) -> ErrorCode | None:
        """§6.1 in order (the v5+ null check is the adapter's)."""
        if not cmd.group_id:
            return E.invalid_group_id
        if self.loading:
            return E.coordinator_load_in_progress
        group = self._groups.get(cmd.group_id)
        if group is None or group.state is _EMPTY:
            return E.unknown_member_id
        if group.state is _DEAD:
            return E.coordinator_not_available
        invalid = group.validate_member(cmd.member_id, cmd.group_instance_id)
        if invalid is not None:
            return E.fenced_instance_id if invalid else E.unknown_member_id
        if cmd.generation_id != group.generation_id:
            return E.illegal_generation
        if _differs(cmd.protocol_type, group.protocol_type) or _differs(
            cmd.protocol_name, group.protocol_name
        ):
            return E.inconsistent_group_protocol
        if group.state is _PREPARING:
            return E.rebalance_in_progress
        return None

    def _synced(self, group: ClassicGroup, member_id: str) -> None:
        pending = group.pending_sync
        if member_id in pending:
            pending.discard(member_id)
            if not pending:
                group.sync_timer_seq = 0
                pending.clear()  # frees the table a set keeps after its last discard

    # -- Heartbeat (hot path) --------------------------------------------------------------------

    def _heartbeat(self, cmd: Heartbeat, now_ms: int) -> HeartbeatResult:
        if not cmd.group_id:
            return _HB[E.invalid_group_id]
        if self.loading:
            return _HB_NONE  # Kafka answers success while loading (GCS heartbeat)
        group = self._groups.get(cmd.group_id)
        if group is None:
            return _HB_UNKNOWN
        state = group.state
        if state is _DEAD:
            return _HB[E.coordinator_not_available]
        instance_id = cmd.group_instance_id
        if instance_id is not None:
            known = group.static_members.get(instance_id)
            if known is None:
                return _HB_UNKNOWN
            if known != cmd.member_id:
                return _HB_FENCED
        member = group.members.get(cmd.member_id)
        if member is None:
            return _HB_UNKNOWN
        if cmd.generation_id != group.generation_id:
            return _HB_ILLEGAL
        if state is _EMPTY:
            return _HB_UNKNOWN
        self._schedule_session(group, member, member.session_timeout_ms, now_ms)
        return _HB_REBALANCING if state is _PREPARING else _HB_NONE

    # -- LeaveGroup ------------------------------------------------------------------------------

    def _leave(self, reply_to: int, cmd: LeaveGroup, now_ms: int, fx: Effects) -> None:
        if not cmd.group_id:
            fx.replies.append((reply_to, LeaveGroupResult(E.invalid_group_id)))
            return
        if self.loading:
            fx.replies.append((reply_to, LeaveGroupResult(E.coordinator_load_in_progress)))
            return
        group = self._groups.get(cmd.group_id)
        if group is None:
            left = tuple(
                LeftMember(m.member_id, m.group_instance_id, E.unknown_member_id)
                for m in cmd.members
            )
            fx.replies.append((reply_to, LeaveGroupResult(E.none, left)))
            return
        # Unreachable, so equivalent under mutation: this coordinator never unloads a group.
        if group.state is _DEAD:  # pragma: no mutate block
            fx.replies.append((reply_to, LeaveGroupResult(E.coordinator_not_available)))
            return
        results: list[LeftMember] = []
        removed = pending_removed = False
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
                    self._drop_member(group, group.members[known], LeaveReason.LEFT, fx)
                    removed = True
            elif m.member_id in group.pending_members:
                del group.pending_members[m.member_id]
                pending_removed = True
            else:
                invalid = group.validate_member(m.member_id, m.group_instance_id)
                if invalid is not None:
                    error = E.fenced_instance_id if invalid else E.unknown_member_id
                else:
                    self._drop_member(group, group.members[m.member_id], LeaveReason.LEFT, fx)
                    removed = True
            results.append(LeftMember(m.member_id, m.group_instance_id, error))
        if removed and group.state in (_STABLE, _COMPLETING):
            self._prepare_rebalance(group, RebalanceCause.MEMBER_LEFT, None, now_ms, fx)
        elif (removed or pending_removed) and group.state is _PREPARING:
            self._maybe_complete_join(group, now_ms, fx)
        fx.replies.append((reply_to, LeaveGroupResult(E.none, tuple(results))))

    # -- timer expiry ----------------------------------------------------------------------------

    def _expire_sessions(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
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
                self._expire_session(group, member_id, now_ms, fx)
        earliest = earliest_session(group)
        if earliest and (group.session_timer_seq == 0 or earliest < group.session_timer_at):
            self._arm_sessions(group, earliest)

    def _expire_session(
        self, group: ClassicGroup, member_id: str, now_ms: int, fx: Effects
    ) -> None:
        if group.state is _DEAD:
            return
        pending = group.pending_members.pop(member_id, None)
        if pending is not None:
            if group.state is _PREPARING and group.all_joined():
                self._complete_join(group, now_ms, fx)
            return
        member = group.members[member_id]
        if not member.is_new and (
            member.join_reply_to is not None or member.sync_reply_to is not None
        ):
            member.deadline_ms = 0  # protected while its request is parked; re-armed on answer
            return
        self._drop_member(group, member, LeaveReason.EXPIRED, fx)
        if group.state in (_STABLE, _COMPLETING):
            self._prepare_rebalance(group, RebalanceCause.SESSION_EXPIRED, member_id, now_ms, fx)
        elif group.state is _PREPARING and group.all_joined():
            self._complete_join(group, now_ms, fx)

    def _expire_pending_sync(self, group: ClassicGroup, now_ms: int, fx: Effects) -> None:
        if group.sync_timer_generation != group.generation_id:
            return
        # Defensive, so equivalent under mutation: a live sync timer implies both (a rebalance
        # cancels it and clears pending_sync, the last SyncGroup cancels it).
        if group.state not in (_COMPLETING, _STABLE) or not group.pending_sync:  # pragma: no mutate
            return
        for member_id in [m for m in group.members if m in group.pending_sync]:
            self._drop_member(group, group.members[member_id], LeaveReason.SYNC_EXPIRED, fx)
        self._prepare_rebalance(group, RebalanceCause.SYNC_EXPIRED, None, now_ms, fx)


def _differs(requested: str | None, current: str | None) -> bool:
    return requested is not None and current is not None and requested != current

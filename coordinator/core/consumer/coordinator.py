"""The KIP-848 consumer-group coordinator: ConsumerGroupHeartbeat (API 68) as Kafka 4.x's
GroupMetadataManager does it, for groups of consumer-protocol members.

`heartbeat(request, now_ms)` -> ConsumerResult(response, records, events). A heartbeat:
1. is checked (GroupCoordinatorService's request checks, then the group, the member, its epoch
   and instance id); a refusal is an error response with no records;
2. creates or updates the member; the group epoch is bumped when the member is new, its topic
   names or regex changed, a regex resolves to other topics, or the group's metadata hash
   (KIP-1101: the Murmur3/XXH3 topic hashes of coordinator.core.topichash) changed;
3. recomputes the target assignment when the group epoch is ahead of the assignment epoch --
   and only then: membership, subscriptions and topic metadata all reach the assignor through a
   group epoch bump, so an unchanged group is never reassigned. At most once per assignment
   interval (coordinator.core.consumer.target, KIP-1263): bumps inside it wait for a timer;
4. reconciles the member toward its target (coordinator.core.consumer.reconcile): revocation
   first, a partition is given only once its previous holder released it.
`expire(now_ms)` fences members whose session timeout (the server's, 45 s by default) or
rebalance timeout (the member's, while it has partitions to revoke) passed. Leaving (epoch -1)
fences at once; a static member leaving with -2 keeps its partitions for its session timeout,
and a new member id with the same instance id takes its place and its assignment.

Invariants:
- Every change to a group is a record, replayed at once by `replay` (the live groups are the
  replay of the records returned so far); a refused request emits nothing. Soft state (timers,
  refresh flags, the topic-hash cache) is rebuilt by `finish_loading`.
- A heartbeat is all-or-nothing: every check that can refuse it runs before its first record.

Where we differ from Kafka 4.1 on purpose:
- Regexes are resolved by the group's next heartbeat after the one that needs them (a new
  regex, or a topic created or deleted), where Kafka resolves them in a background task and
  bumps the epoch when it completes: the same steps (the heartbeat that subscribes is answered
  with what is resolved so far; the regex's topics come with a later epoch). Only a change of
  the resolved topics is written. Topics are not filtered by DESCRIBE ACLs here (the shell may
  filter the catalog).
- Members may rejoin with epoch 0 while the coordinator still knows them (KAFKA-19233, Kafka
  4.3), and a full group still admits its static members' rejoins (KAFKA-20601, Kafka 4.3).
- Ties Kafka leaves to HashMap order (preferred assignor, member order in assignors) are broken
  by name.

Pure: no I/O, no clock (time is an argument; wall time = now_ms + epoch_offset_ms).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable

from coordinator.core.consumer.assignors import ASSIGNORS
from coordinator.core.consumer.checks import (
    Refused,
    check_not_full,
    member_for,
    request_error,
)
from coordinator.core.consumer.describe import describe_group
from coordinator.core.consumer.member_update import AssignmentAcks, updated_member
from coordinator.core.consumer.messages import (
    ConsumerGroupConfig,
    ConsumerGroupDescription,
    ConsumerGroupHeartbeat,
    ConsumerResult,
    HeartbeatResponse,
    MemberRemoved,
)
from coordinator.core.consumer.model import (
    EMPTY_PARTITIONS,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    MemberState,
    to_topic_partitions,
)
from coordinator.core.consumer.op import Op as _Op
from coordinator.core.consumer.rebalances import Rebalances, removal_cause
from coordinator.core.consumer.reconcile import reconcile
from coordinator.core.consumer.record_helpers import (
    current_assignment_record,
    remove_member_records,
    subscription_record,
    target_record,
)
from coordinator.core.consumer.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from coordinator.core.consumer.regex import InvalidRegex, compile_regex, resolve
from coordinator.core.consumer.replay import replay
from coordinator.core.consumer.target import AssignmentPacer, maybe_update_target
from coordinator.core.consumer.timers import MemberTimers, TimerKind
from coordinator.core.messages import ErrorCode
from coordinator.core.topichash import TopicHashCache
from coordinator.core.topics import TopicCatalog

__all__ = ["ConsumerGroupCoordinator"]

_NO_TOPICS: frozenset[str] = frozenset()
# The group epoch of a group before its first bump (Kafka 4.4: ModernGroup sets it to 1).
NEW_GROUP_EPOCH = 1


class ConsumerGroupCoordinator:
    """The consumer groups of one coordinator, their timers and their topic-hash cache."""

    __slots__ = (
        "_hashed_topics",
        "_hashes",
        "_new_member_id",
        "_refresh_metadata",
        "_refresh_regexes",
        "_topics_version",
        "acks",
        "catalog",
        "config",
        "epoch_offset_ms",
        "groups",
        "pacer",
        "rebalances",
        "timers",
    )

    def __init__(
        self,
        config: ConsumerGroupConfig,
        catalog: TopicCatalog,
        new_member_id: Callable[[], str],
        epoch_offset_ms: int = 0,
    ) -> None:
        unknown = [a for a in config.assignors if a not in ASSIGNORS]
        if not config.assignors or unknown:
            raise ValueError(f"unknown consumer group assignors {unknown}: use {list(ASSIGNORS)}")
        self.config = config
        self.catalog = catalog
        self.epoch_offset_ms = epoch_offset_ms
        self.groups: dict[str, ConsumerGroup] = {}
        self.timers = MemberTimers()
        self._new_member_id = new_member_id  # v0 only: Kafka's Uuid.randomUuid().toString()
        # Our own cache over the shared catalog: its topic -> groups index is for consumer groups.
        self._hashes = TopicHashCache(catalog, config.topic_hash)
        self._hashed_topics: dict[str, frozenset[str]] = {}
        self._refresh_metadata: set[str] = set()  # recompute the metadata hash on next heartbeat
        self._refresh_regexes: set[str] = set()  # re-resolve the regexes on next heartbeat
        self._topics_version = 0  # topic changes seen: the version of resolved regexes
        self.rebalances = Rebalances()  # for the events only (metrics, history)
        self.pacer = AssignmentPacer(config.assignment_interval_ms)
        self.acks = AssignmentAcks()  # which answers repeat the assignment (soft state)

    # -- API 68 ---------------------------------------------------------------------------------

    def heartbeat(self, request: ConsumerGroupHeartbeat, now_ms: int) -> ConsumerResult:
        refused = request_error(request, self.config.assignors)
        if refused is not None:
            return ConsumerResult(HeartbeatResponse(refused.error, refused.message))
        op = _Op(self.groups, now_ms)
        try:
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                response = self._leave(op, request)
            else:
                response = self._heartbeat(op, request, now_ms)
        except Refused as e:
            assert not op.records, "a refusal after a record: the checks must come first"
            return ConsumerResult(HeartbeatResponse(e.error, e.message))
        self.rebalances.settle(op, request.group_id, self.config.assignors)
        return op.result(response)

    # -- a regular heartbeat ----------------------------------------------------------------------

    def _heartbeat(self, op: _Op, req: ConsumerGroupHeartbeat, now_ms: int) -> HeartbeatResponse:
        # Phase 1: every check (nothing emitted yet).
        joining = req.member_epoch == 0
        group = self.groups.get(req.group_id)
        if group is None:
            if not joining:
                raise Refused(
                    ErrorCode.group_id_not_found, f"Consumer group {req.group_id} not found."
                )
            # Its first member gets epoch 2, as in Kafka 4.4 (tests/conformance checks it).
            group = ConsumerGroup(req.group_id, group_epoch=NEW_GROUP_EPOCH)
        check_not_full(group, req, self.config.max_size)
        member_id = req.member_id or self._new_member_id()
        member, replaced = member_for(group, req, member_id, joining)
        updated = updated_member(member, req)
        old_regex, new_regex = member.subscribed_topic_regex, updated.subscribed_topic_regex
        old_regex_members = group.regex_counts.get(old_regex, 0)
        new_regex_members = group.regex_counts.get(new_regex, 0)
        if old_regex != new_regex and new_regex and new_regex_members == 0:
            try:
                compile_regex(new_regex)
            except InvalidRegex as e:
                raise Refused(ErrorCode.invalid_regular_expression, str(e)) from None
        if member.state is MemberState.UNKNOWN and (
            req.topic_partitions is None or req.topic_partitions
        ):
            raise Refused(
                ErrorCode.fenced_member_epoch,
                "The consumer group member is in a unknown state. The member must abandon "
                "all its partitions and rejoin.",
            )

        # Phase 2: records, each applied as it is emitted.
        group = self.groups.setdefault(req.group_id, group)
        gid = group.group_id
        if replaced is not None:
            self._replace_static_member(op, group, replaced, member)
        bump = group.group_epoch == 0
        added = member_id not in group.members
        bump |= self._write_subscription(op, group, member, updated, added)
        bump |= self._update_regexes(
            op, group, old_regex, new_regex, old_regex_members, new_regex_members, now_ms
        )
        if bump or gid in self._refresh_metadata:
            cause = "member_joined" if added else "subscription_changed" if bump else ""
            self._update_metadata(op, group, bump, cause, updated)
        self._maybe_update_target(op, group)
        target = group.target_assignment.get(member_id, EMPTY_PARTITIONS)

        current = group.members[member_id]
        if not current.is_reconciled_to(group.assignment_epoch):
            reconciled = reconcile(
                current,
                group.assignment_epoch,
                target,
                group.current_partition_epoch,
                req.topic_partitions,
            )
            if reconciled != current:
                op.emit(current_assignment_record(gid, reconciled))
                if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                    self.timers.schedule(
                        TimerKind.REBALANCE,
                        gid,
                        member_id,
                        now_ms + reconciled.rebalance_timeout_ms,
                        reconciled.member_epoch,
                    )
                else:
                    self.timers.cancel(TimerKind.REBALANCE, gid, member_id)
        final = group.members[member_id]
        self.rebalances.reconciled(op.events, now_ms, group, current, final)
        self.timers.schedule(
            TimerKind.SESSION, gid, member_id, now_ms + self.config.session_timeout_ms
        )

        send_assignment = self.acks.due(group, req, member, final)
        return HeartbeatResponse(
            ErrorCode.none,
            member_id=member_id,
            member_epoch=final.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=to_topic_partitions(final.assigned_partitions) if send_assignment else None,
        )

    def _write_subscription(self, op: _Op, group: ConsumerGroup, member: ConsumerGroupMember,
                            updated: ConsumerGroupMember, added: bool) -> bool:  # fmt: skip
        """Record 5 for a new or changed member -> whether its topic names changed."""
        if added:
            self.rebalances.member_added(op.events, group.group_id, updated)
        if not added and updated.same_metadata(member):
            return False
        op.emit(subscription_record(group.group_id, updated))
        return updated.subscribed_topic_names != member.subscribed_topic_names

    def _replace_static_member(
        self, op: _Op, group: ConsumerGroup, old: ConsumerGroupMember, new: ConsumerGroupMember
    ) -> None:
        """Kafka's replaceMember: the old id's three tombstones, then the new id with the old
        target assignment and current assignment (epoch 0)."""
        gid = group.group_id
        target = group.target_assignment.get(old.member_id, EMPTY_PARTITIONS)
        for record in remove_member_records(gid, old.member_id):
            op.emit(record)
        op.emit(subscription_record(gid, new))
        op.emit(target_record(gid, new.member_id, target))
        op.emit(current_assignment_record(gid, new))
        if old.member_id != new.member_id:
            self.timers.cancel_member(gid, old.member_id)
        op.events.append(MemberRemoved(gid, old.member_id, "static_replaced", old.instance_id,
                                       old.client_id, old.client_host))  # fmt: skip

    def _update_regexes(
        self,
        op: _Op,
        group: ConsumerGroup,
        old_regex: str,
        new_regex: str,
        old_regex_members: int,
        new_regex_members: int,
        now_ms: int,
    ) -> bool:
        """Kafka's maybeUpdateRegularExpressions. A regex new to the group is resolved in a
        later step, as Kafka's background resolution is: this heartbeat goes on with what is
        resolved so far, and the group's next heartbeat resolves it and bumps the epoch. The
        counts are the group's before this heartbeat. Returns whether to bump the epoch."""
        gid = group.group_id
        bump = False
        to_resolve: set[str] = set()
        unresolved = False
        if old_regex != new_regex:
            if old_regex and old_regex_members == 1:
                op.emit(
                    ConsumerGroupRecord(ConsumerGroupRegularExpressionKey(gid, old_regex), None)
                )
            if new_regex:
                if new_regex_members == 0:  # the subscription changed: Kafka bumps already
                    unresolved = bump = True
                else:
                    bump = new_regex in group.resolved_regexes
            elif old_regex:
                bump = True
        if gid in self._refresh_regexes:
            self._refresh_regexes.discard(gid)
            to_resolve |= set(group.regex_counts)
        if unresolved:
            self._refresh_regexes.add(gid)
        names = [t.name for t in self.catalog] if to_resolve else []
        for regex in sorted(to_resolve):
            if regex not in group.regex_counts:
                continue
            topics = resolve(regex, names)
            old = group.resolved_regexes.get(regex)
            if old is not None and old.topics == topics:
                continue
            bump |= topics != (old.topics if old is not None else _NO_TOPICS)
            value = ConsumerGroupRegularExpressionValue(
                tuple(sorted(topics)), self._topics_version, now_ms + self.epoch_offset_ms
            )
            op.emit(ConsumerGroupRecord(ConsumerGroupRegularExpressionKey(gid, regex), value))
        return bump

    def _update_metadata(
        self, op: _Op, group: ConsumerGroup, bump: bool, cause: str, member: ConsumerGroupMember
    ) -> int:
        """Kafka's updateSubscriptionMetadata: the group's metadata hash over its subscribed
        topics (KIP-1101); bump the epoch when asked to (`cause`) or when the hash changed."""
        gid = group.group_id
        metadata_hash = self._group_hash(group)
        bump |= metadata_hash != group.metadata_hash
        epoch = group.group_epoch
        if bump:
            epoch += 1
            op.emit(
                ConsumerGroupRecord(
                    ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(epoch, metadata_hash)
                )
            )
            self.rebalances.bumped(op.events, op.now_ms, group, epoch, metadata_hash, cause, member)
        self._refresh_metadata.discard(gid)
        if group.has_subscription_metadata_record:  # pre-4.1 record: superseded by the hash
            op.emit(ConsumerGroupRecord(ConsumerGroupPartitionMetadataKey(gid), None))
        return epoch

    def _group_hash(self, group: ConsumerGroup) -> int:
        topics = frozenset(group.subscribed_topic_names())
        gid = group.group_id
        self._hashes.subscribe(gid, self._hashed_topics.get(gid, _NO_TOPICS), topics)
        self._hashed_topics[gid] = topics
        return self._hashes.group_hash(topics)

    def _maybe_update_target(self, op: _Op, group: ConsumerGroup) -> None:
        maybe_update_target(self, op, group)

    # -- leaving and fencing ----------------------------------------------------------------------

    def _leave(self, op: _Op, req: ConsumerGroupHeartbeat) -> HeartbeatResponse:
        """Kafka's consumerGroupLeave: -1 removes the member; -2 (static only) keeps it, and
        its partitions, at epoch -2 until it rejoins or its session times out."""
        group = self.groups.get(req.group_id)
        if group is None:
            # Kafka's words for a leave differ from a heartbeat's ("Consumer group ... not
            # found."): checked against Kafka 4.4 by tests/conformance.
            raise Refused(ErrorCode.group_id_not_found, f"Group {req.group_id} not found.")
        left = HeartbeatResponse(
            ErrorCode.none, member_id=req.member_id, member_epoch=req.member_epoch
        )
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise Refused(
                    ErrorCode.unknown_member_id,
                    f"Member {req.member_id} is not a member of group {group.group_id}.",
                )
            self._fence(op, group, [member], "left")
            return left
        member = group.static_member(req.instance_id)
        if member is None:
            raise Refused(ErrorCode.unknown_member_id, f"Instance id {req.instance_id} is unknown.")
        if member.member_id != req.member_id:
            raise Refused(
                ErrorCode.fenced_instance_id,
                f"Static member {req.member_id} with instance id {req.instance_id} was fenced "
                f"by member {member.member_id}.",
            )
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            leaving = dataclasses.replace(
                member,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
                partitions_pending_revocation=EMPTY_PARTITIONS,
            )
            op.emit(current_assignment_record(group.group_id, leaving))
            return HeartbeatResponse(
                ErrorCode.none,
                member_id=member.member_id,
                member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH,
            )
        self._fence(op, group, [member], "left")
        return left

    def _fence(
        self, op: _Op, group: ConsumerGroup, members: list[ConsumerGroupMember], reason: str
    ) -> None:
        """Kafka's consumerGroupFenceMembers: the members' tombstones, the tombstones of the
        regexes only they used, and a group epoch bump (always, even when the group empties)."""
        if not members:
            return
        gid = group.group_id
        regex_users: dict[str, int] = {}
        for m in members:
            if m.subscribed_topic_regex:
                regex_users[m.subscribed_topic_regex] = (
                    regex_users.get(m.subscribed_topic_regex, 0) + 1
                )
        dropped = [r for r, n in sorted(regex_users.items()) if group.regex_counts.get(r) == n]
        for m in members:
            for record in remove_member_records(gid, m.member_id):
                op.emit(record)
            self.timers.cancel_member(gid, m.member_id)
            op.events.append(
                MemberRemoved(gid, m.member_id, reason, m.instance_id, m.client_id, m.client_host)
            )
        for regex in dropped:
            op.emit(ConsumerGroupRecord(ConsumerGroupRegularExpressionKey(gid, regex), None))
        metadata_hash = self._group_hash(group)
        epoch = group.group_epoch + 1
        op.emit(
            ConsumerGroupRecord(
                ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(epoch, metadata_hash)
            )
        )
        if not group.members:
            # KAFKA-20442 (Kafka 4.4): an emptied group's assignment epoch catches up with its
            # group epoch, as kafka-consumer-groups.sh --describe --state --verbose shows it.
            op.emit(
                ConsumerGroupRecord(
                    ConsumerGroupTargetAssignmentMetadataKey(gid),
                    ConsumerGroupTargetAssignmentMetadataValue(epoch),
                )
            )
        cause = removal_cause(reason)
        self.rebalances.bumped(op.events, op.now_ms, group, epoch, metadata_hash, cause, members[0])

    # -- timers ---------------------------------------------------------------------------------

    def expire(self, now_ms: int) -> ConsumerResult:
        """Fence the members whose session timeout, or rebalance timeout at the epoch it was
        set for, is due at `now_ms`."""
        op = _Op(self.groups, now_ms)
        for due in self.timers.pop_due(now_ms):
            group = self.groups.get(due.group_id)
            member = None if group is None else group.members.get(due.member_id)
            if group is not None and due.kind is TimerKind.ASSIGNMENT:
                self._maybe_update_target(op, group)
                continue
            if group is None or member is None:
                continue
            if due.kind is TimerKind.SESSION:
                self._fence(op, group, [member], "session_expired")
            elif member.member_epoch == due.epoch:
                self._fence(op, group, [member], "rebalance_timeout")
        for gid in dict.fromkeys(e.group_id for e in op.events):
            self.rebalances.settle(op, gid, self.config.assignors)
        return op.result(None)

    def next_deadline_ms(self) -> int | None:
        return self.timers.next_deadline_ms()

    # -- topics (KIP-1101) ------------------------------------------------------------------------

    def topic_changed(self, name: str) -> None:
        """A topic was created, changed (partitions, racks) or deleted in the catalog: the
        groups reading it recompute their metadata hash on their next heartbeat (Kafka's
        requestMetadataRefresh), and groups with regexes re-resolve them."""
        self._hashes.invalidate(name)
        self._topics_version += 1
        for gid, group in self.groups.items():
            if group.regex_counts:
                self._refresh_regexes.add(gid)
            if name in self._hashed_topics.get(gid, _NO_TOPICS) or (
                name in group.subscribed_topic_names()
            ):
                self._refresh_metadata.add(gid)
                self.rebalances.topic_changed(gid, name)

    # -- loading --------------------------------------------------------------------------------

    def replay(self, record: ConsumerGroupRecord) -> None:
        """Apply a record read from the log (coordinator.core.consumer.replay)."""
        replay(self.groups, record)

    def unload_group(self, group_id: str) -> None:
        """Forget a group whose state partition moved to another fleet member (its records stay
        on the partition for the new owner): no record, no event."""
        group = self.groups.pop(group_id, None)
        if group is None:
            return
        for member_id in group.members:
            self.timers.cancel_member(group_id, member_id)
        self._hashes.subscribe(group_id, self._hashed_topics.pop(group_id, _NO_TOPICS), _NO_TOPICS)
        self._refresh_metadata.discard(group_id)
        self._refresh_regexes.discard(group_id)
        self.rebalances.forget(group_id)
        self.pacer.forget(group_id)
        self.acks.forget(group_id)
        self.timers.cancel(TimerKind.ASSIGNMENT, group_id, "")

    def finish_loading(self, now_ms: int, group_ids: Iterable[str] | None = None) -> None:
        """After replay: every member gets a fresh session timeout, members with partitions to
        revoke a fresh rebalance timeout (Kafka's onLoaded), and every group re-checks its
        metadata hash and regexes on its next heartbeat (topics may have changed meanwhile).
        `group_ids`: only these (a fleet member loading one state partition)."""
        loaded = self.groups.items() if group_ids is None else (
            (gid, self.groups[gid]) for gid in group_ids if gid in self.groups
        )  # fmt: skip
        for gid, group in loaded:
            for mid, m in group.members.items():
                # A classic member (issue 23 item 6) keeps its own session timeout and has no
                # rebalance timer (its join and sync timers start with its next request).
                session_ms = (
                    self.config.session_timeout_ms
                    if m.classic is None
                    else m.classic.session_timeout_ms
                )
                self.timers.schedule(TimerKind.SESSION, gid, mid, now_ms + session_ms)
                if m.classic is None and m.state is MemberState.UNREVOKED_PARTITIONS:
                    self.timers.schedule(
                        TimerKind.REBALANCE,
                        gid,
                        mid,
                        now_ms + m.rebalance_timeout_ms,
                        m.member_epoch,
                    )
            self._refresh_metadata.add(gid)
            if group.regex_counts:
                self._refresh_regexes.add(gid)
            self.rebalances.resumed(now_ms, group)

    # -- admin ----------------------------------------------------------------------------------

    def delete_group(self, group_id: str) -> tuple[ErrorCode, tuple[ConsumerGroupRecord, ...]]:
        """DeleteGroups: an Empty group's tombstones (Kafka's createGroupTombstoneRecords);
        its offsets are the caller's."""
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.group_id_not_found, ()
        if group.members:
            return ErrorCode.non_empty_group, ()
        self.rebalances.forget(group_id)
        self.acks.forget(group_id)
        op = _Op(self.groups)
        for regex in sorted(group.resolved_regexes):
            op.emit(ConsumerGroupRecord(ConsumerGroupRegularExpressionKey(group_id, regex), None))
        op.emit(ConsumerGroupRecord(ConsumerGroupTargetAssignmentMetadataKey(group_id), None))
        if group.has_subscription_metadata_record:
            op.emit(ConsumerGroupRecord(ConsumerGroupPartitionMetadataKey(group_id), None))
        op.emit(ConsumerGroupRecord(ConsumerGroupMetadataKey(group_id), None))
        self._hashes.subscribe(group_id, self._hashed_topics.pop(group_id, _NO_TOPICS), _NO_TOPICS)
        self._refresh_metadata.discard(group_id)
        self._refresh_regexes.discard(group_id)
        self.pacer.forget(group_id)
        self.timers.cancel(TimerKind.ASSIGNMENT, group_id, "")
        return ErrorCode.none, tuple(op.records)

    def state_of(self, group_id: str) -> ConsumerGroupState:
        group = self.groups.get(group_id)
        return ConsumerGroupState.DEAD if group is None else group.state

    def list_groups(self) -> list[tuple[str, ConsumerGroupState]]:
        """(group id, state) of every consumer group, for ListGroups (type "consumer")."""
        return [(gid, g.state) for gid, g in sorted(self.groups.items())]

    def describe(self, group_id: str) -> ConsumerGroupDescription | None:
        """ConsumerGroupDescribe (API 69): None = GROUP_ID_NOT_FOUND."""
        group = self.groups.get(group_id)
        return None if group is None else describe_group(group, self.config.assignors)


# -- helpers ------------------------------------------------------------------------------------


def iter_records(results: Iterable[ConsumerResult]) -> list[ConsumerGroupRecord]:
    """Every record of a sequence of results, in order (for loading tests and tools)."""
    return [r for result in results for r in result.records]

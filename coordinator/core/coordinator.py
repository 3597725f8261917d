"""The coordinator core: every classic group and its offsets, pure and synchronous.

Contract (the runtime depends on exactly this):
- `handle(reply_to, command, now_ms) -> Effects`: apply one request. `reply_to` is an opaque int
  the runtime uses to route the answer. The answer may be in the returned Effects or, for a parked
  JoinGroup/SyncGroup, in the Effects of a later call (handle or expire). Every reply_to is
  answered exactly once.
- `expire(now_ms) -> Effects`: fire every timer whose deadline is <= now_ms.
- `next_deadline_ms() -> int | None`: the earliest pending timer, for the runtime's single timer.
- `replay(record)` / `finish_loading(now_ms)`: rebuild durable state at start-up. The first
  `replay` sets `loading`; `finish_loading` clears it and starts the timers. A core that never
  replays is simply not loading. `loading_partitions` is the loading fast path's way in for
  offset values (record_codec.BatchReplayer), with the same effect as replaying them.
- Effects.replies are released by the runtime only after Effects.records (and every record
  appended before them) are durable.

Time is `now_ms`, a monotonic int. Wall-clock timestamps (record fields) are
now_ms + epoch_offset_ms.
No asyncio, no sockets, no clock reads, no randomness except through the injected member-id factory.

Layout: `coordinator.core.group` (one group's bookkeeping), `coordinator.core.joins` (the rebalance
protocol and timers, base class of GroupCoordinator), `coordinator.core.offsets` (offset store and
rules), and this module: dispatch, offsets and admin APIs, retention, loading, introspection.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from typing import assert_never

from coordinator.core.effects import CoordinatorConfig, Effects, MemberIdFactory
from coordinator.core.events import (
    GroupCreated,
    GroupDeleted,
    OffsetsCommitted,
    OffsetsDeleted,
    OffsetsExpired,
    RebalanceCause,
)
from coordinator.core.group import ClassicGroup, GroupSnapshot, GroupState, Member
from coordinator.core.messages import (
    Command,
    DeletedGroup,
    DeleteGroups,
    DeleteGroupsResult,
    DescribedGroup,
    DescribedMember,
    DescribeGroups,
    DescribeGroupsResult,
    ErrorCode,
    FetchedGroup,
    FetchedPartition,
    FetchedTopic,
    FetchTopic,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    LeaveGroup,
    ListedGroup,
    ListGroups,
    ListGroupsResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetDelete,
    OffsetDeleteResult,
    OffsetFetch,
    OffsetFetchResult,
    PartitionError,
    Protocol,
    SyncGroup,
    TopicErrors,
)
from coordinator.core.offsets import (
    OffsetStore,
    expiry_base,
    is_expired,
    java_length,
    validate_commit,
)
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    TopicKey,
    TopicValue,
)
from coordinator.core.timers import RETENTION
from coordinator.core.topic_watch import TopicWatch
from coordinator.core.topics import TopicCatalog

__all__ = ["CoordinatorConfig", "Effects", "GroupCoordinator", "MemberIdFactory"]

E = ErrorCode
_COMMITTED = tuple(PartitionError(p, ErrorCode.none) for p in range(1024))


def _committed(partition: int) -> PartitionError:
    """PartitionError(partition, NONE), shared for the usual partition numbers: immutable, and
    one less object a committed partition."""
    return _COMMITTED[partition] if 0 <= partition < 1024 else PartitionError(partition, E.none)


_NON_EMPTY = (
    GroupState.STABLE,
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
)


class GroupCoordinator(TopicWatch):
    def __init__(
        self,
        config: CoordinatorConfig,
        topics: TopicCatalog,
        new_member_id: MemberIdFactory,
        epoch_offset_ms: int = 0,
    ) -> None:
        super().__init__(config, topics, new_member_id, epoch_offset_ms)
        self._offsets = OffsetStore()

    # -- entry points ----------------------------------------------------------------------------

    def heartbeat(self, command: Heartbeat, now_ms: int) -> HeartbeatResult:
        """The hot path without Effects: a heartbeat writes no record and emits no event."""
        return self._heartbeat(command, now_ms)

    def earliest_timer_ms(self) -> int | None:
        """The top of the timer heap, possibly a stale entry: O(1), for a cheap re-arm check.
        `next_deadline_ms` is the exact answer."""
        heap = self._heap
        return heap[0][0] if heap else None

    def handle(self, reply_to: int, command: Command, now_ms: int) -> Effects:
        if type(command) is Heartbeat:  # hot path: no timers to arm, no dispatch
            return Effects([(reply_to, self._heartbeat(command, now_ms))])
        fx = Effects()
        self._handle(reply_to, command, now_ms, fx)
        return fx

    def handle_many(self, commands: Iterable[tuple[int, Command]], now_ms: int) -> Effects:
        """`handle` for several commands at the same instant, in order, their effects gathered
        in one Effects (replies, records and events in the order separate calls would give):
        the requests a pass of the server's loop read, at the cost of one."""
        fx = Effects()
        for reply_to, command in commands:
            self._handle(reply_to, command, now_ms, fx)
        return fx

    def _handle(self, reply_to: int, command: Command, now_ms: int, fx: Effects) -> None:
        if self._retention_seq == 0 and not self.loading:
            self._arm_retention(now_ms)
        match command:
            case JoinGroup():
                self._join(reply_to, command, now_ms, fx)
            case SyncGroup():
                self._sync(reply_to, command, now_ms, fx)
            case Heartbeat():
                fx.replies.append((reply_to, self._heartbeat(command, now_ms)))
            case LeaveGroup():
                self._leave(reply_to, command, now_ms, fx)
            case OffsetCommit():
                self._commit(reply_to, command, now_ms, fx)
            case OffsetFetch():
                fx.replies.append((reply_to, self._fetch(command)))
            case OffsetDelete():
                self._delete_offsets(reply_to, command, fx)
            case DescribeGroups():
                fx.replies.append((reply_to, self._describe(command)))
            case ListGroups():
                fx.replies.append((reply_to, self._list(command)))
            case DeleteGroups():
                self._delete_groups(reply_to, command, fx)
            case _:
                assert_never(command)

    def expire(self, now_ms: int) -> Effects:
        fx = Effects()
        if self.loading:
            return fx
        if self._retention_seq == 0:
            self._arm_retention(now_ms)
        heap = self._heap
        while heap and heap[0][0] <= now_ms:
            entry = heapq.heappop(heap)
            if not self._entry_is_live(entry):
                continue
            if entry[2] == RETENTION:
                self._retention_seq = 0
                self._expire_offsets(now_ms, fx)
                self._arm_retention(now_ms)
            else:
                self._fire(entry, now_ms, fx)
        return fx

    def _arm_retention(self, now_ms: int) -> None:
        interval = self.config.offsets_retention_check_interval_ms
        self._retention_seq = self._push(now_ms + interval, RETENTION, "")

    # -- OffsetCommit ----------------------------------------------------------------------------

    def _commit(self, reply_to: int, cmd: OffsetCommit, now_ms: int, fx: Effects) -> None:
        """One pass over the partitions (commits are the second-hottest request): an unknown
        topic or partition -> 3 at the broker level (KafkaApis), never reaching the group; the
        others get the group's validation error (docs/protocol.md §10.1) or are committed."""
        has = self.topics.has_partition
        gid = cmd.group_id
        group = self._groups.get(gid)
        error: ErrorCode | None = None
        checked = False  # the group is validated once, and only if some partition exists
        wall = self._wall(now_ms)
        expire_at = wall + cmd.retention_time_ms if cmd.retention_time_ms != -1 else None
        max_len = self.config.offset_metadata_max_bytes
        put = self._offsets.put
        records = fx.records
        committed = 0
        topics: list[TopicErrors] = []
        for t in cmd.topics:
            name = t.name
            results: list[PartitionError] = []
            for p in t.partitions:
                partition = p.partition
                if not has(name, partition):
                    results.append(PartitionError(partition, E.unknown_topic_or_partition))
                    continue
                if not checked:
                    checked = True
                    error = self._commit_error(group, cmd)
                if error is not None:
                    results.append(PartitionError(partition, error))
                    continue
                metadata = p.metadata or ""
                if java_length(metadata) > max_len:
                    results.append(PartitionError(partition, E.offset_metadata_too_large))
                    continue
                value = OffsetCommitValue(p.offset, p.leader_epoch, metadata, wall, expire_at)
                put(gid, name, partition, value)
                records.append(Record(OffsetCommitKey(gid, name, partition), value))
                committed += 1
                results.append(_committed(partition))
            topics.append(TopicErrors(name, tuple(results)))
        fx.replies.append((reply_to, OffsetCommitResult(tuple(topics))))
        if not checked or error is not None:
            return
        if group is None:
            if not committed:
                # Kafka keeps the new simple group in memory even when nothing was written; we
                # create it only with its first offset so that replaying the log rebuilds it.
                return
            group = ClassicGroup(gid, None)
            self._groups[gid] = group
            fx.events.append(GroupCreated(gid))
        elif group.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            member = group.members.get(cmd.member_id)
            if member is not None:
                self._schedule_session(group, member, member.session_timeout_ms, now_ms)
        if committed:
            fx.events.append(OffsetsCommitted(gid, committed))

    def _commit_error(self, group: ClassicGroup | None, cmd: OffsetCommit) -> ErrorCode | None:
        """The coordinator-level error of a commit to `group` (§10.1); None = accept."""
        if self.loading:
            return E.coordinator_load_in_progress
        if group is None:
            if cmd.generation_id >= 0:
                return E.group_id_not_found if cmd.api_version >= 9 else E.illegal_generation
            return None
        return validate_commit(group, cmd.generation_id, cmd.member_id, cmd.group_instance_id)

    # -- OffsetFetch -----------------------------------------------------------------------------

    def _fetch(self, cmd: OffsetFetch) -> OffsetFetchResult:
        # require_stable: there are no transactional offsets, so every offset is stable.
        return OffsetFetchResult(tuple(self._fetch_group(g.group_id, g.topics) for g in cmd.groups))

    def _fetch_group(self, group_id: str, topics: tuple[FetchTopic, ...] | None) -> FetchedGroup:
        if self.loading:
            return FetchedGroup(group_id, E.coordinator_load_in_progress, ())
        stored = self._offsets.topics(group_id)
        if topics is None:
            return FetchedGroup(
                group_id,
                E.none,
                tuple(
                    FetchedTopic(name, tuple(_fetched(p, v) for p, v in parts.items()))
                    for name, parts in stored.items()
                ),
            )
        out: list[FetchedTopic] = []
        for t in topics:
            parts = stored.get(t.name, {})
            out.append(FetchedTopic(t.name, tuple(_fetched(p, parts.get(p)) for p in t.partitions)))
        return FetchedGroup(group_id, E.none, tuple(out))

    # -- OffsetDelete ----------------------------------------------------------------------------

    def _delete_offsets(self, reply_to: int, cmd: OffsetDelete, fx: Effects) -> None:
        error = E.none
        group = self._groups.get(cmd.group_id)
        if not cmd.group_id:
            error = E.invalid_group_id
        elif self.loading:
            error = E.coordinator_load_in_progress
        elif group is None or group.state is GroupState.DEAD:
            error = E.group_id_not_found
        elif group.state in _NON_EMPTY and group.protocol_type != "consumer":
            error = E.non_empty_group
        if error is not E.none or group is None:
            fx.replies.append((reply_to, OffsetDeleteResult(error)))
            return
        gid = cmd.group_id
        deleted = 0
        topics: list[TopicErrors] = []
        for t in cmd.topics:
            subscribed = group.is_subscribed_to_topic(t.name)
            parts: list[PartitionError] = []
            for p in t.partitions:
                if not self.topics.has_partition(t.name, p):
                    parts.append(PartitionError(p, E.unknown_topic_or_partition))
                elif subscribed:
                    parts.append(PartitionError(p, E.group_subscribed_to_topic))
                else:
                    if self._offsets.delete(gid, t.name, p):
                        fx.records.append(Record(OffsetCommitKey(gid, t.name, p), None))
                        deleted += 1
                    parts.append(PartitionError(p, E.none))
            topics.append(TopicErrors(t.name, tuple(parts)))
        if deleted:
            fx.events.append(OffsetsDeleted(gid, deleted))
        fx.replies.append((reply_to, OffsetDeleteResult(E.none, tuple(topics))))

    # -- retention (§10.4) -----------------------------------------------------------------------

    def _expire_offsets(self, now_ms: int, fx: Effects) -> None:
        wall = self._wall(now_ms)
        retention = self.config.offsets_retention_ms
        for gid, group in list(self._groups.items()):
            stored = self._offsets.topics(gid)
            if stored:
                expires, base = expiry_base(group)
                if not expires:
                    continue
                all_expired = True
                expired: list[tuple[str, int]] = []
                # Equivalent mutants on the no-mutate lines: `all_expired` is only read as
                # `not all_expired`, so None is False; and True for a subscribed topic changes
                # nothing, since only an Empty group is removed and an Empty group reads no topic
                # (its subscribed topics are computed from no members: frozenset()).
                for topic, parts in stored.items():
                    if group.is_subscribed_to_topic(topic):
                        all_expired = False  # pragma: no mutate
                        continue
                    for partition, value in parts.items():
                        if is_expired(value, base, wall, retention):
                            expired.append((topic, partition))
                        else:
                            all_expired = False  # pragma: no mutate
                for topic, partition in expired:
                    self._offsets.delete(gid, topic, partition)
                    fx.records.append(Record(OffsetCommitKey(gid, topic, partition), None))
                if expired:
                    fx.events.append(OffsetsExpired(gid, len(expired)))
                if not all_expired:
                    continue
            if group.state is GroupState.EMPTY:
                self._remove_group(gid, fx)

    def _remove_group(self, gid: str, fx: Effects) -> None:
        for topic, partition in self._offsets.drop_group(gid):
            fx.records.append(Record(OffsetCommitKey(gid, topic, partition), None))
        fx.records.append(Record(GroupMetadataKey(gid), None))
        group = self._groups.pop(gid)
        self.topic_hashes.untrack(group)
        fx.events.append(GroupDeleted(gid))

    # -- DescribeGroups, ListGroups, DeleteGroups (§11) ------------------------------------------

    def _describe(self, cmd: DescribeGroups) -> DescribeGroupsResult:
        out: list[DescribedGroup] = []
        for gid in cmd.group_ids:
            if self.loading:
                out.append(DescribedGroup(E.coordinator_load_in_progress, gid, "", "", "", ()))
                continue
            group = self._groups.get(gid)
            if group is None:
                if cmd.api_version >= 6:  # KIP-1043
                    out.append(
                        DescribedGroup(
                            E.group_id_not_found,
                            gid,
                            "Dead",
                            "",
                            "",
                            (),
                            f"Group {gid} not found.",
                        )
                    )
                else:
                    out.append(DescribedGroup(E.none, gid, "Dead", "", "", ()))
                continue
            stable = group.state is GroupState.STABLE
            # Equivalent under mutation, here and in the two guards below: outside Stable, name is
            # None and no protocol is named None, so metadata() is b"" anyway; in Stable the
            # group always has a protocol_name.
            name = group.protocol_name if stable else None  # pragma: no mutate
            members = tuple(
                DescribedMember(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(name) if stable else b"",  # pragma: no mutate
                    m.assignment,
                )
                for m in group.members.values()
            )
            out.append(
                DescribedGroup(
                    E.none,
                    gid,
                    group.state.value,
                    group.protocol_type or "",
                    (group.protocol_name or "") if stable else "",  # pragma: no mutate
                    members,
                )
            )
        return DescribeGroupsResult(tuple(out))

    def _list(self, cmd: ListGroups) -> ListGroupsResult:
        if self.loading:
            return ListGroupsResult(E.coordinator_load_in_progress, ())
        states = {s.strip().lower() for s in cmd.states_filter}
        types = {t.strip().lower() for t in cmd.types_filter}
        if types and "classic" not in types:
            return ListGroupsResult(E.none, ())
        return ListGroupsResult(
            E.none,
            tuple(
                ListedGroup(gid, g.protocol_type or "", g.state.value, "classic")
                for gid, g in self._groups.items()
                if not states or g.state.value.lower() in states
            ),
        )

    def _delete_groups(self, reply_to: int, cmd: DeleteGroups, fx: Effects) -> None:
        results: list[DeletedGroup] = []
        for gid in cmd.group_ids:
            group = self._groups.get(gid)
            if self.loading:
                error = E.coordinator_load_in_progress
            elif group is None or group.state is GroupState.DEAD:
                error = E.group_id_not_found
            elif group.state in _NON_EMPTY:
                error = E.non_empty_group
            else:
                error = E.none
                self._remove_group(gid, fx)
            results.append(DeletedGroup(gid, error))
        fx.replies.append((reply_to, DeleteGroupsResult(tuple(results))))

    # -- loading (§12.3) -------------------------------------------------------------------------

    def replay(self, record: Record) -> None:
        """Apply one durable record. Sets `loading` until `finish_loading`."""
        self.loading = True
        key = record.key
        if isinstance(key, TopicKey):  # coordinator.core.topic_watch
            assert record.value is None or isinstance(record.value, TopicValue)
            self.replay_topic(key, record.value)
            return
        if isinstance(key, OffsetCommitKey):
            if record.value is None:
                self._offsets.delete(key.group_id, key.topic, key.partition)
                return
            assert isinstance(record.value, OffsetCommitValue)
            if key.group_id not in self._groups:
                self._groups[key.group_id] = ClassicGroup(key.group_id, None)
            self._offsets.put(key.group_id, key.topic, key.partition, record.value)
            return
        if record.value is None:
            self._groups.pop(key.group_id, None)
            return
        assert isinstance(record.value, GroupMetadataValue)
        self._groups[key.group_id] = _group_from_record(key.group_id, record.value)

    def loading_partitions(self, group_id: str, topic: str) -> dict[int, OffsetCommitValue]:
        """Loading fast path (record_codec.BatchReplayer): the table that replayed offsets of
        (group_id, topic) go into, the group created as `replay` does. The caller puts a value
        in it at once and stops using it after any other kind of record."""
        self.loading = True
        if group_id not in self._groups:
            self._groups[group_id] = ClassicGroup(group_id, None)
        return self._offsets.table(group_id, topic)

    def finish_loading(self, now_ms: int) -> None:
        """Start every loaded member's session timer; send oversized groups into a rebalance."""
        self.loading = False
        for group in self._groups.values():
            for member in group.members.values():
                self._schedule_session(group, member, member.session_timeout_ms, now_ms)
            if len(group.members) > self.config.max_group_size:
                # Kafka's onLoaded; nothing is parked yet, so the Effects hold only an event.
                self._prepare_rebalance(
                    group, RebalanceCause.GROUP_MAX_SIZE, None, now_ms, Effects()
                )
        if self._retention_seq == 0:
            self._arm_retention(now_ms)

    # -- introspection (status page, metrics, tests) ---------------------------------------------

    def groups(self) -> Iterator[GroupSnapshot]:
        for group in list(self._groups.values()):
            yield GroupSnapshot.of(group)

    def group(self, group_id: str) -> GroupSnapshot | None:
        group = self._groups.get(group_id)
        return None if group is None else GroupSnapshot.of(group)

    def group_counts(self) -> Iterator[tuple[str, str, str, int, int, int, int]]:
        """(group_id, state, protocol_type, generation_id, members, static members, pending
        members) per group: what a metrics scrape needs, without copying any member."""
        for gid, g in list(self._groups.items()):
            yield (
                gid,
                g.state.value,
                g.protocol_type or "",
                g.generation_id,
                len(g.members),
                len(g.static_members),
                len(g.pending_members),
            )

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], OffsetCommitValue]:
        return {(t, p): v for t, p, v in self._offsets.items(group_id)}

    def offset_group_ids(self) -> list[str]:
        return self._offsets.group_ids()


def _fetched(partition: int, value: OffsetCommitValue | None) -> FetchedPartition:
    if value is None:
        return FetchedPartition(partition, -1, -1, "", E.none)
    return FetchedPartition(partition, value.offset, value.leader_epoch, value.metadata, E.none)


def _group_from_record(group_id: str, value: GroupMetadataValue) -> ClassicGroup:
    """ClassicGroup.fromRecord: Stable with members, else Empty; one protocol per member."""
    ts = value.current_state_timestamp_ms
    group = ClassicGroup(group_id, None if ts < 0 else ts)
    # Equivalent mutants on the next line and on `protocol_type=` below: `add` sets the group's
    # protocol type from the first member's (the only reader of a member's protocol_type), and
    # it is set again after the members.
    group.protocol_type = value.protocol_type or None  # pragma: no mutate
    group.generation_id = value.generation_id
    group.protocol_name = value.protocol_name
    for mm in value.members:
        rebalance = (
            mm.session_timeout_ms if mm.rebalance_timeout_ms == -1 else mm.rebalance_timeout_ms
        )
        # The `or ""` is an equivalent mutant: a group with members always has a protocol.
        protocols = (Protocol(value.protocol_name or "", mm.subscription),)  # pragma: no mutate
        group.add(
            Member(
                mm.member_id,
                mm.group_instance_id,
                client_id=mm.client_id,
                client_host=mm.client_host,
                rebalance_timeout_ms=rebalance,
                session_timeout_ms=mm.session_timeout_ms,
                protocol_type=value.protocol_type,  # pragma: no mutate
                protocols=protocols,
                assignment=mm.assignment,
            )
        )
    group.protocol_type = value.protocol_type or None
    if value.members:
        group.state = GroupState.STABLE
        if value.leader is not None and value.leader in group.members:
            group.leader_id = value.leader
    group.subscribed_topics = group.compute_subscribed_topics()
    group.metadata_hash = value.metadata_hash  # compared in TopicWatch.topics_loaded
    return group

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
  offset values (record_batch.BatchReplayer), with the same effect as replaying them.
- `load_groups(records, now_ms)` / `unload_groups(group_ids)`: a sidecar fleet moves one state
  partition's groups in or out of a serving core (parked requests of unloaded groups are
  answered NOT_COORDINATOR in the returned Effects).
- Effects.replies are released by the runtime only after Effects.records (and every record
  appended before them) are durable.

Time is `now_ms`, a monotonic int. Wall-clock timestamps (record fields) are
now_ms + epoch_offset_ms.
No asyncio, no sockets, no clock reads, no randomness except through the injected member-id factory.

Layout: `core.state.CoreState` is the whole state (groups, timer heap, offset store, topic
catalog); `core.handlers.<api>` answers one API each, as a function of (state, reply_to, command,
now_ms) that appends to an Effects; `core.rebalance` is the machinery they share, `core.expiry`
the timers, `core.topic_watch` topic changes, `core.loading` replay; `core.group` one group's
bookkeeping and the replies by state (STATE_REPLIES). This module holds one state and routes to
them (HANDLERS: command type -> handler), plus introspection for the status page and metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from coordinator.core import expiry, loading, topic_watch, txn_offsets
from coordinator.core.consumer import ConsumerGroupCoordinator, hold
from coordinator.core.consumer.messages import ConsumerGroupDescribe, ConsumerGroupHeartbeat
from coordinator.core.effects import AnyCommand, CoordinatorConfig, Effects, MemberIdFactory
from coordinator.core.group import ClassicGroup, GroupSnapshot
from coordinator.core.handlers import (
    consumer,
    group_configs,
    groups,
    heartbeat,
    join,
    leave,
    offset_commit,
    offset_delete,
    offset_fetch,
    share,
    share_admin,
    sync,
)
from coordinator.core.messages import (
    DeleteGroups,
    DescribeGroups,
    ErrorCode,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    LeaveGroup,
    ListGroups,
    OffsetCommit,
    OffsetDelete,
    OffsetFetch,
    SyncGroup,
)
from coordinator.core.rebalance import group_record
from coordinator.core.records import (
    OffsetCommitValue,
    Record,
    TopicKey,
    TopicValue,
    TxnOffsetKey,
    TxnOffsetValue,
)
from coordinator.core.share.admin_messages import (
    AlterShareGroupOffsets,
    DeleteShareGroupOffsets,
    DescribeShareGroupOffsets,
)
from coordinator.core.share.config_messages import AlterGroupConfigs, DescribeGroupConfigs
from coordinator.core.share.coordinator import ShareGroupCoordinator
from coordinator.core.share.messages import ShareGroupDescribe, ShareGroupHeartbeat
from coordinator.core.state import CoreState
from coordinator.core.topichash import TopicHashCache
from coordinator.core.topics import TopicCatalog, TopicInfo

__all__ = ["HANDLERS", "CoordinatorConfig", "Effects", "GroupCoordinator", "MemberIdFactory"]

Handler = Callable[[CoreState, int, Any, int, Effects], None]

# Routing as data: every Command type and the one handler that answers it. tests/core checks it
# covers `messages.Command` exactly; the server's route table (coordinator.serve) checks that
# every advertised group API reaches one of these.
HANDLERS: dict[type, Handler] = {
    JoinGroup: join.handle,
    SyncGroup: sync.handle,
    Heartbeat: heartbeat.handle,
    LeaveGroup: leave.handle,
    OffsetCommit: offset_commit.handle,
    OffsetFetch: offset_fetch.handle,
    OffsetDelete: offset_delete.handle,
    DescribeGroups: groups.describe,
    ListGroups: groups.list_groups,
    DeleteGroups: groups.delete,
    # KIP-848 (issue 23): the consumer groups' APIs, core.handlers.consumer.
    ConsumerGroupHeartbeat: consumer.heartbeat,
    ConsumerGroupDescribe: consumer.describe,
    # KIP-932: the share groups' membership APIs, core.handlers.share.
    ShareGroupHeartbeat: share.heartbeat,
    ShareGroupDescribe: share.describe,
    # KIP-932: the share groups' offset admin APIs, core.handlers.share_admin.
    DescribeShareGroupOffsets: share_admin.describe,
    AlterShareGroupOffsets: share_admin.alter,
    DeleteShareGroupOffsets: share_admin.delete,
    # Group configs (KIP-848/932's GROUP config resource), core.handlers.group_configs.
    DescribeGroupConfigs: group_configs.describe,
    AlterGroupConfigs: group_configs.alter,
}


class GroupCoordinator:
    """One core state and the entry points the runtime calls (module docstring)."""

    def __init__(
        self,
        config: CoordinatorConfig,
        topics: TopicCatalog,
        new_member_id: MemberIdFactory,
        epoch_offset_ms: int = 0,
    ) -> None:
        self.state = CoreState(config, topics, new_member_id, epoch_offset_ms)

    @property
    def config(self) -> CoordinatorConfig:
        return self.state.config

    @property
    def topics(self) -> TopicCatalog:
        return self.state.topics

    @property
    def topic_hashes(self) -> TopicHashCache:
        return self.state.topic_hashes

    @property
    def loading(self) -> bool:
        return self.state.loading

    @loading.setter
    def loading(self, value: bool) -> None:
        """The server sets it before the log is read, so requests wait for the load."""
        self.state.loading = value

    # -- entry points ----------------------------------------------------------------------------

    def heartbeat(self, command: Heartbeat, now_ms: int) -> HeartbeatResult:
        """The hot path without Effects: a heartbeat writes no record and emits no event."""
        return heartbeat.answer(self.state, command, now_ms)

    def handle(self, reply_to: int, command: AnyCommand, now_ms: int) -> Effects:
        if type(command) is Heartbeat:  # hot path: no timers to arm, no dispatch
            return Effects([(reply_to, heartbeat.answer(self.state, command, now_ms))])
        fx = Effects()
        self._handle(reply_to, command, now_ms, fx)
        return fx

    def handle_many(self, commands: list[tuple[int, AnyCommand]], now_ms: int) -> Effects:
        """`handle` for several commands at the same instant, their effects gathered in one
        Effects (replies, records and events in the order separate calls would give): the
        requests a pass of the server's loop read (one per connection), at the cost of one.
        In arrival order, except that consumer heartbeats that may free partitions go first
        (`consumer.release_first`)."""
        fx = Effects()
        if len(commands) > 1 and self.state.consumer.groups:
            commands = consumer.release_first(self.state, commands)
        for reply_to, command in commands:
            self._handle(reply_to, command, now_ms, fx)
        return fx

    def _handle(self, reply_to: int, command: AnyCommand, now_ms: int, fx: Effects) -> None:
        state = self.state
        if state.timers.retention_seq == 0 and not state.loading:
            expiry.arm_retention(state, now_ms)
        HANDLERS[type(command)](state, reply_to, command, now_ms, fx)

    def hold_deadline_ms(
        self, command: ConsumerGroupHeartbeat, now_ms: int, join: bool = False
    ) -> int | None:
        """Until when the shell may hold this beat back (`join`: a join's follow-up); None:
        process it now (coordinator.core.consumer.hold)."""
        if self.state.loading:
            return None
        return hold.hold_deadline_ms(self.state.consumer, command, now_ms, join)

    def holdable(self, command: ConsumerGroupHeartbeat) -> bool:
        """Whether a held beat still only waits (coordinator.core.consumer.hold)."""
        return not self.state.loading and hold.holdable(self.state.consumer, command)

    def expire(self, now_ms: int) -> Effects:
        """Fire every timer whose deadline is <= now_ms (the classic groups', then the
        consumer groups')."""
        fx = expiry.expire(self.state, now_ms)
        consumer.expire(self.state, now_ms, fx)
        share.expire(self.state, now_ms, fx)
        return fx

    def next_deadline_ms(self) -> int | None:
        return _earliest(
            _earliest(self.state.timers.next_deadline_ms(), self.state.consumer.next_deadline_ms()),
            self.state.share.next_deadline_ms(),
        )

    def earliest_timer_ms(self) -> int | None:
        """The top of the timer heap, possibly a stale entry: O(1), for a cheap re-arm check.
        `next_deadline_ms` is the exact answer."""
        return _earliest(
            _earliest(self.state.timers.earliest_ms(), self.state.consumer.next_deadline_ms()),
            self.state.share.next_deadline_ms(),
        )

    @property
    def share(self) -> ShareGroupCoordinator:
        """The KIP-932 share groups and their share partitions (`share_partition(group id,
        topic id, partition)`): the ShareFetch/ShareAcknowledge shell's way in."""
        return self.state.share

    @property
    def consumer(self) -> ConsumerGroupCoordinator:
        """The KIP-848 consumer groups (introspection: status page, metrics, tests)."""
        return self.state.consumer

    # -- topics (core.topic_watch) ---------------------------------------------------------------

    def topic_changed(
        self, name: str, info: TopicInfo | None, now_ms: int, keep_offsets: bool = False
    ) -> Effects:
        fx = topic_watch.topic_changed(self.state, name, info, now_ms, keep_offsets)
        # Consumer groups reading it recompute their metadata hash on their next heartbeat.
        self.state.consumer.topic_changed(name)
        self.state.share.topic_changed(name)
        return fx

    def delete_topic_offsets(self, name: str) -> Effects:
        return topic_watch.delete_topic_offsets(self.state, name)

    def offset_topics(self) -> set[str]:
        return topic_watch.offset_topics(self.state)

    def topics_loaded(self, now_ms: int) -> Effects:
        return topic_watch.topics_loaded(self.state, now_ms)

    def declare_topics(self, declared: Iterable[TopicInfo], now_ms: int) -> Effects:
        declared = list(declared)
        fx = topic_watch.declare_topics(self.state, declared, now_ms)
        for info in declared:
            self.state.consumer.topic_changed(info.name)
            self.state.share.topic_changed(info.name)
        return fx

    def replay_topic(self, key: TopicKey, value: TopicValue | None) -> None:
        topic_watch.replay_topic(self.state, key, value)

    # -- loading (core.loading) ------------------------------------------------------------------

    def replay(self, record: Record) -> None:
        loading.replay(self.state, record)

    def loading_partitions(self, group_id: str, topic: str) -> dict[int, OffsetCommitValue]:
        return loading.loading_partitions(self.state, group_id, topic)

    def finish_loading(self, now_ms: int) -> None:
        loading.finish_loading(self.state, now_ms)

    def load_groups(self, records: list[Record], now_ms: int) -> Effects:
        return loading.load_groups(self.state, records, now_ms)

    def unload_groups(self, group_ids: list[str]) -> Effects:
        return loading.unload_groups(self.state, group_ids)

    # -- transactional offsets (core.txn_offsets; the sidecar's, issue 29) ------------------------

    def txn_check(self, command: txn_offsets.TxnOffsetCommit) -> ErrorCode | None:
        return txn_offsets.check(self.state, command)

    def txn_stage(self, command: txn_offsets.TxnOffsetCommit, now_ms: int) -> tuple[Effects, Any]:
        """(effects, the OffsetCommitResult to answer once they are durable)."""
        fx = Effects()
        return fx, txn_offsets.stage(self.state, command, now_ms, fx)

    def txn_settle(
        self,
        group_id: str,
        committed: list[tuple[TxnOffsetKey, TxnOffsetValue]],
        aborted: list[tuple[TxnOffsetKey, TxnOffsetValue]],
    ) -> tuple[Effects, int]:
        fx = Effects()
        return fx, txn_offsets.settle(self.state, group_id, committed, aborted, fx)

    def txn_pending(self, group_id: str) -> list[tuple[TxnOffsetKey, TxnOffsetValue]]:
        return self.state.txn_pending.entries(group_id)

    def txn_pending_groups(self) -> list[str]:
        return self.state.txn_pending.group_ids()

    # -- introspection (status page, metrics, tests) ---------------------------------------------

    def group_record(self, group: ClassicGroup, now_ms: int) -> Record:
        return group_record(self.state, group, now_ms)

    def groups(self) -> Iterator[GroupSnapshot]:
        for group in list(self.state.groups.values()):
            yield GroupSnapshot.of(group)

    def group(self, group_id: str) -> GroupSnapshot | None:
        group = self.state.groups.get(group_id)
        return None if group is None else GroupSnapshot.of(group)

    def group_counts(self) -> Iterator[tuple[str, str, str, int, int, int, int]]:
        """(group_id, state, protocol_type, generation_id, members, static members, pending
        members) per group: what a metrics scrape needs, without copying any member."""
        for gid, g in list(self.state.groups.items()):
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
        return {(t, p): v for t, p, v in self.state.offsets.items(group_id)}

    def offset_group_ids(self) -> list[str]:
        return self.state.offsets.group_ids()


def _earliest(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else min(a, b)

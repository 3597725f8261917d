"""The core's whole state, in one object: what every handler reads and changes.

One `CoreState` holds the groups, the timer heap, the offset store and the topic catalog with its
KIP-1101 hash cache. The handlers (`core.handlers.*`, `core.rebalance`, `core.expiry`,
`core.topic_watch`, `core.loading`) are functions of (state, command, now_ms) that append their
replies, records and events to an `Effects`; `core.coordinator.GroupCoordinator` owns one state
and routes each command to its handler.

Invariants:
- `groups` holds every loaded classic group, `offsets` every committed offset: a group with
  offsets has an entry in `groups` (possibly Empty with no members) or is a consumer group
  (`consumer.groups`, KIP-848); no id is in both.
- `loading` is True from the first replayed record until `core.loading.finish_loading`; while it
  is set, requests answer COORDINATOR_LOAD_IN_PROGRESS and no timer fires.
- Wall-clock timestamps (record fields) are `wall(now_ms)`: now_ms is monotonic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.core.consumer import ConsumerGroupConfig, ConsumerGroupCoordinator
from coordinator.core.effects import CoordinatorConfig, MemberIdFactory
from coordinator.core.group import STATE_REPLIES, Check, ClassicGroup
from coordinator.core.messages import ErrorCode
from coordinator.core.offsets import OffsetStore
from coordinator.core.security import SecurityState
from coordinator.core.share.coordinator import ShareGroupCoordinator
from coordinator.core.share.messages import ShareGroupConfig
from coordinator.core.timers import TimerHeap
from coordinator.core.topichash import TopicHashCache
from coordinator.core.topics import TopicCatalog
from coordinator.core.txn_pending import PendingOffsets


@dataclass(eq=False, slots=True)
class CoreState:
    config: CoordinatorConfig
    topics: TopicCatalog
    new_member_id: MemberIdFactory
    epoch_offset_ms: int = 0
    groups: dict[str, ClassicGroup] = field(init=False, default_factory=dict)
    offsets: OffsetStore = field(init=False, default_factory=OffsetStore)
    timers: TimerHeap = field(init=False)
    topic_hashes: TopicHashCache = field(init=False)  # KIP-1101
    loading: bool = field(init=False, default=False)
    # Names with a topic record (value or tombstone).
    topic_records: set[str] = field(init=False, default_factory=set)
    # Names deleted within rebalance.TOPIC_DELETED_LABEL_MS: one that comes back was re-created.
    # Not persisted (only a label depends on it); pruned on every deletion.
    deleted_topics_ms: dict[str, int] = field(init=False, default_factory=dict)
    # ACLs and SCRAM credentials (issue 22): records of the same log, replayed like the others.
    security: SecurityState = field(init=False, default_factory=SecurityState)
    # Pending transactional offsets (issue 29, core.txn_offsets): records of the same log.
    txn_pending: PendingOffsets = field(init=False, default_factory=PendingOffsets)
    # The KIP-848 consumer groups (issue 23, core.handlers.consumer): their own records, timers
    # and hash cache over the same catalog. A group id is in `groups` or here, never both.
    consumer: ConsumerGroupCoordinator = field(init=False)
    # The KIP-932 share groups (core.handlers.share) and their share partitions. A group id is
    # a classic, a consumer or a share group, never two of them.
    share: ShareGroupCoordinator = field(init=False)

    def __post_init__(self) -> None:
        self.timers = TimerHeap(self.groups)
        self.topic_hashes = TopicHashCache(self.topics, self.config.topic_hash)
        config = self.config
        self.consumer = ConsumerGroupCoordinator(
            ConsumerGroupConfig(
                session_timeout_ms=config.consumer_session_timeout_ms,
                heartbeat_interval_ms=config.consumer_heartbeat_interval_ms,
                assignment_interval_ms=config.consumer_assignment_interval_ms,
                topic_hash=config.topic_hash,
            ),
            self.topics,
            _uuid_part(self.new_member_id),
            self.epoch_offset_ms,
        )
        self.share = ShareGroupCoordinator(
            ShareGroupConfig(
                session_timeout_ms=config.share_session_timeout_ms,
                heartbeat_interval_ms=config.share_heartbeat_interval_ms,
                max_size=config.share_max_size,
                topic_hash=config.topic_hash,
                partition=config.share_partition,
            ),
            self.topics,
        )

    def wall(self, now_ms: int) -> int:
        return now_ms + self.epoch_offset_ms

    def admin_error(self, group: ClassicGroup | None, check: Check) -> ErrorCode | None:
        """An admin request's error for a group (OffsetDelete, DeleteGroups): loading, an unknown
        group, then the group's state (STATE_REPLIES); None = go on."""
        if self.loading:
            return ErrorCode.coordinator_load_in_progress
        if group is None:
            return ErrorCode.group_id_not_found
        return STATE_REPLIES[group.state][check]


def _uuid_part(new_member_id: MemberIdFactory) -> Callable[[], str]:
    """ConsumerGroupHeartbeat v0's server-generated member id: the factory's uuid part (Kafka's
    Uuid.randomUuid().toString(); v1 clients generate their own). A closure over the factory,
    not a method of the state: no reference cycle (DiskJournal.load freezes the loaded state)."""
    return lambda: new_member_id("")[1:]

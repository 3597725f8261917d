"""What one call into the core produces, and the core's configuration.

Split out of `core.coordinator` so the core's own modules (`state`, `handlers`, `rebalance`) can
use these types without importing `core.coordinator`, which re-exports every name (the public
path).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from coordinator.core.consumer.messages import (
    ConsumerGroupDescribe,
    ConsumerGroupDescribeResult,
    ConsumerGroupHeartbeat,
    HeartbeatResponse,
)
from coordinator.core.events import Event
from coordinator.core.messages import Command, Result
from coordinator.core.records import Record
from coordinator.core.share.admin_messages import (
    AlterShareGroupOffsets,
    AlterShareGroupOffsetsResult,
    DeleteShareGroupOffsets,
    DeleteShareGroupOffsetsResult,
    DescribeShareGroupOffsets,
    DescribeShareGroupOffsetsResult,
)
from coordinator.core.share.config_messages import (
    AlterGroupConfigs,
    AlterGroupConfigsResult,
    DescribeGroupConfigs,
    DescribeGroupConfigsResult,
)
from coordinator.core.share.messages import (
    ShareGroupDescribe,
    ShareGroupDescribeResult,
    ShareGroupHeartbeat,
    ShareHeartbeatResponse,
)
from coordinator.core.share.persisted import ShareUpdate
from coordinator.core.share.values import SharePartitionConfig

# The classic APIs' commands and results (core.messages), the KIP-848 ones (issue 23,
# core.consumer.messages; core.handlers.consumer answers them) and the KIP-932 share groups'
# (core.share.messages; core.handlers.share).
AnyCommand = (
    Command
    | ConsumerGroupHeartbeat
    | ConsumerGroupDescribe
    | ShareGroupHeartbeat
    | ShareGroupDescribe
    | DescribeShareGroupOffsets  # KIP-932's offset admin APIs (core.handlers.share_admin)
    | AlterShareGroupOffsets
    | DeleteShareGroupOffsets
    | DescribeGroupConfigs  # the GROUP config resource (core.handlers.group_configs)
    | AlterGroupConfigs
)
AnyResult = (
    Result
    | HeartbeatResponse
    | ConsumerGroupDescribeResult
    | ShareHeartbeatResponse
    | ShareGroupDescribeResult
    | DescribeShareGroupOffsetsResult
    | AlterShareGroupOffsetsResult
    | DeleteShareGroupOffsetsResult
    | DescribeGroupConfigsResult
    | AlterGroupConfigsResult
)


@dataclass(slots=True)
class Effects:
    replies: list[tuple[int, AnyResult]] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    # KIP-932: share partitions' state changes a request caused (a share member left or was
    # fenced, its records released): ((group id, topic id, partition), ShareUpdate), for the
    # shell that persists share state.
    share_updates: list[tuple[tuple[str, uuid.UUID, int], ShareUpdate]] = field(
        default_factory=list
    )


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    """Kafka's defaults (docs/protocol.md §14)."""

    session_timeout_min_ms: int = 6_000
    session_timeout_max_ms: int = 1_800_000
    initial_rebalance_delay_ms: int = 3_000
    max_group_size: int = 2**31 - 1
    new_member_join_timeout_ms: int = 300_000  # Kafka's constant, not configurable there
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    topic_hash: str = "murmur3"  # KIP-1101 topic hash function: murmur3 (seed 002) or xxh3 (4.1)
    # KIP-848 consumer groups (issue 23): the server owns their session and heartbeat interval.
    consumer_session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    consumer_heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    # group.consumer.assignment.interval.ms (KIP-1263; Kafka: 1000): 0 = on every epoch bump.
    consumer_assignment_interval_ms: int = 100
    # group.consumer.migration.policy (Kafka 4.0+): the online upgrade (classic -> consumer) and
    # downgrade of non-empty groups: "bidirectional", "upgrade", "downgrade" or "disabled".
    consumer_migration_policy: str = "bidirectional"
    # KIP-932 share groups: group.share.session.timeout.ms, .heartbeat.interval.ms, .max.size,
    # and the share partitions' defaults (record lock duration, delivery count limit, locks).
    share_session_timeout_ms: int = 45_000
    share_heartbeat_interval_ms: int = 5_000
    share_max_size: int = 200
    share_partition: SharePartitionConfig = field(default_factory=SharePartitionConfig)


MemberIdFactory = Callable[[str], str]
"""prefix (client id or group instance id) -> "<prefix>-<uuid4>"."""

"""What goes in and out of the share-group core: its configuration, ShareGroupHeartbeat (API 76)
and ShareGroupDescribe (API 77) as version-neutral values, and results. Converting from and to
kio's `share_group_heartbeat.v1` / `share_group_describe.v1` is the shell's job
(coordinator.serve.share_adapters). Errors are `ErrorCode` values, never exceptions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from coordinator.core.consumer.records import TopicPartitions
from coordinator.core.messages import ErrorCode
from coordinator.core.share.persisted import ShareUpdate
from coordinator.core.share.records import ShareGroupKey, ShareGroupValue
from coordinator.core.share.values import SharePartitionConfig

__all__ = [
    "DescribedShareGroup",
    "DescribedShareMember",
    "ShareGroupConfig",
    "ShareGroupDescribe",
    "ShareGroupDescribeResult",
    "ShareGroupHeartbeat",
    "ShareHeartbeatResponse",
    "ShareRecord",
    "ShareResult",
]


@dataclass(frozen=True, slots=True)
class ShareGroupConfig:
    """Kafka 4.4's group.share.* broker defaults (GroupCoordinatorConfig, ShareGroupConfig)."""

    session_timeout_ms: int = 45_000  # group.share.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.share.heartbeat.interval.ms
    max_size: int = 200  # group.share.max.size
    topic_hash: str = "murmur3"  # KIP-1101 hash function (coordinator.core.topichash)
    partition: SharePartitionConfig = field(default_factory=SharePartitionConfig)


@dataclass(frozen=True, slots=True)
class ShareGroupHeartbeat:
    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class ShareHeartbeatResponse:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicPartitions, ...] | None = None  # None: not sent


@dataclass(frozen=True, slots=True)
class ShareRecord:
    key: ShareGroupKey
    value: ShareGroupValue | None


@dataclass(frozen=True, slots=True)
class ShareResult:
    response: ShareHeartbeatResponse
    records: tuple[ShareRecord, ...] = ()
    # A member left or was fenced: its records released in each share partition of the group,
    # ((group id, topic id, partition), the ShareUpdate to persist).
    partition_updates: tuple[tuple[tuple[str, uuid.UUID, int], ShareUpdate], ...] = ()


@dataclass(frozen=True, slots=True)
class ShareGroupDescribe:
    group_ids: tuple[str, ...]
    include_authorized_operations: bool = False


@dataclass(frozen=True, slots=True)
class DescribedShareMember:
    member_id: str
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    assignment: tuple[tuple[uuid.UUID, str, tuple[int, ...]], ...]  # (topic id, name, partitions)


@dataclass(frozen=True, slots=True)
class DescribedShareGroup:
    group_id: str
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedShareMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ShareGroupDescribeResult:
    groups: tuple[DescribedShareGroup, ...]

"""The share groups' offset admin APIs as version-neutral values (KIP-932):
DescribeShareGroupOffsets (API 90), AlterShareGroupOffsets (API 91) and DeleteShareGroupOffsets
(API 92). The core answers them in `coordinator.core.handlers.share_admin`; converting from and
to kio is `coordinator.serve.share_admin_adapters`. Errors are `ErrorCode` values.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from coordinator.core.messages import ErrorCode

__all__ = [
    "AlterShareGroupOffsets",
    "AlterShareGroupOffsetsResult",
    "AlteredSharePartition",
    "AlteredShareTopic",
    "DeleteShareGroupOffsets",
    "DeleteShareGroupOffsetsResult",
    "DeletedShareTopic",
    "DescribeShareGroupOffsets",
    "DescribeShareGroupOffsetsResult",
    "DescribedShareOffsetGroup",
    "DescribedShareOffsetTopic",
    "DescribedSharePartition",
    "ShareOffsetsGroupRequest",
]

NO_OFFSET = -1  # a share partition not initialized (Kafka's start offset and lag -1)


@dataclass(frozen=True, slots=True)
class ShareOffsetsGroupRequest:
    group_id: str
    topics: tuple[tuple[str, tuple[int, ...]], ...] | None  # None: every partition it has


@dataclass(frozen=True, slots=True)
class DescribeShareGroupOffsets:
    groups: tuple[ShareOffsetsGroupRequest, ...]


@dataclass(frozen=True, slots=True)
class DescribedSharePartition:
    partition: int
    start_offset: int = NO_OFFSET
    leader_epoch: int = 0
    # Records at or above the start offset already acknowledged or archived (KIP-1226): the
    # shell that knows the partition's high watermark computes the lag from it.
    delivery_complete_count: int = 0
    lag: int = NO_OFFSET
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribedShareOffsetTopic:
    name: str
    topic_id: uuid.UUID | None
    partitions: tuple[DescribedSharePartition, ...]


@dataclass(frozen=True, slots=True)
class DescribedShareOffsetGroup:
    group_id: str
    topics: tuple[DescribedShareOffsetTopic, ...] = ()
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeShareGroupOffsetsResult:
    groups: tuple[DescribedShareOffsetGroup, ...]


@dataclass(frozen=True, slots=True)
class AlterShareGroupOffsets:
    group_id: str
    topics: tuple[tuple[str, tuple[tuple[int, int], ...]], ...]  # (name, ((partition, offset)))


@dataclass(frozen=True, slots=True)
class AlteredSharePartition:
    partition: int
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class AlteredShareTopic:
    name: str
    topic_id: uuid.UUID | None
    partitions: tuple[AlteredSharePartition, ...]


@dataclass(frozen=True, slots=True)
class AlterShareGroupOffsetsResult:
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    topics: tuple[AlteredShareTopic, ...] = ()


@dataclass(frozen=True, slots=True)
class DeleteShareGroupOffsets:
    group_id: str
    topics: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeletedShareTopic:
    name: str
    topic_id: uuid.UUID | None
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteShareGroupOffsetsResult:
    error: ErrorCode = ErrorCode.none
    error_message: str | None = None
    topics: tuple[DeletedShareTopic, ...] = ()

"""The values a share partition takes and gives: acknowledge types, acquire modes, its config,
and the results of `SharePartition.acquire` / `acknowledge` (`coordinator.core.share.partition`).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from coordinator.core.messages import ErrorCode
from coordinator.core.share.persisted import ShareUpdate

__all__ = [
    "ACK_TYPES",
    "AcknowledgeType",
    "Acknowledged",
    "AcquireMode",
    "Acquired",
    "AcquiredRecords",
    "SharePartitionConfig",
    "batch_end",
    "coalesce",
]


class AcknowledgeType(enum.IntEnum):
    """ShareFetch/ShareAcknowledge AcknowledgeTypes (RENEW is ShareFetch/ShareAcknowledge v2,
    KIP-1222)."""

    GAP = 0
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


class AcquireMode(enum.IntEnum):
    """ShareFetch v2's ShareAcquireMode (KIP-1206)."""

    BATCH_OPTIMIZED = 0
    RECORD_LIMIT = 1


ACK_TYPES = frozenset(int(t) for t in AcknowledgeType)


@dataclass(frozen=True, slots=True)
class SharePartitionConfig:
    """The group's share settings (defaults are Kafka 4.4's broker defaults)."""

    record_lock_duration_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_record_locks: int = 2000  # group.share.partition.max.record.locks
    renew_enabled: bool = True  # share.renew.acknowledge.enable (group config)


@dataclass(frozen=True, slots=True)
class AcquiredRecords:
    """ShareFetchResponse's AcquiredRecords entry."""

    first_offset: int
    last_offset: int
    delivery_count: int


@dataclass(frozen=True, slots=True)
class Acquired:
    records: tuple[AcquiredRecords, ...]
    count: int  # offsets handed to the member
    update: ShareUpdate | None  # records archived on the way (aborted, compacted away)


@dataclass(frozen=True, slots=True)
class Acknowledged:
    error: ErrorCode
    update: ShareUpdate | None
    message: str = ""


def coalesce(got: Sequence[tuple[int, int]]) -> list[AcquiredRecords]:
    out: list[AcquiredRecords] = []
    for offset, count in got:
        if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == count:
            out[-1] = AcquiredRecords(out[-1].first_offset, offset, count)
        else:
            out.append(AcquiredRecords(offset, offset, count))
    return out


def batch_end(batches: Sequence[tuple[int, int]], offset: int) -> int:
    """The last offset of the fetched batch holding `offset` (Kafka's
    lastOffsetFromBatchWithRequestOffset)."""
    for base, last in batches:
        if base <= offset <= last:
            return last
    return offset

"""A share partition's durable state as a coordinator record (groupcoord's own type 104).

Kafka keeps share-partition state on `__share_group_state` (ShareSnapshot/ShareUpdate records of
its share coordinator). groupcoord keeps it with the group it belongs to instead: one record per
(group, topic id, partition) holding the partition's full `ShareSnapshot` (start offset and
the AVAILABLE / ACKNOWLEDGED / ARCHIVED batches with their delivery counts; never an
acquisition lock, as Kafka never persists ACQUIRED). So it goes where the group's records go:
the local log, or in a sidecar fleet the group's state partition, written by its owner only and
fenced like every record of the group; compaction keeps the latest per partition, and replay
(`coordinator.core.loading`) rebuilds the share partitions on a restart or a failover.

Key   = int16 104, group id string, topic id (16 bytes), partition int32.
Value = int16 version 0, snapshot epoch int32, state epoch int32, leader epoch int32, start
        offset int64, int32 count of batches, each: first offset int64, last offset int64,
        state int8, delivery count int16. A tombstone drops the partition's state.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Final

from coordinator.core.record_wire import RecordDecodeError
from coordinator.core.share.partition import SharePartition
from coordinator.core.share.persisted import RecordState, ShareSnapshot, StateBatch

SHARE_PARTITION_STATE_TYPE: Final = 104
_PREFIX: Final = struct.pack(">h", SHARE_PARTITION_STATE_TYPE)
_HEAD = struct.Struct(">hiiiqi")  # version, snapshot/state/leader epoch, start offset, count
_BATCH = struct.Struct(">qqbh")  # first, last, state, delivery count
_VERSION: Final = 0


@dataclass(frozen=True, slots=True)
class SharePartitionStateKey:
    group_id: str
    topic_id: uuid.UUID
    partition: int


@dataclass(frozen=True, slots=True)
class SharePartitionStateValue:
    snapshot: ShareSnapshot


def record_of(
    key: tuple[str, uuid.UUID, int], part: SharePartition
) -> tuple[SharePartitionStateKey, SharePartitionStateValue]:
    """The (key, value) of a share partition's state now."""
    group_id, topic_id, partition = key
    return (
        SharePartitionStateKey(group_id, topic_id, partition),
        SharePartitionStateValue(part.snapshot()),
    )


def encode_key(key: SharePartitionStateKey) -> bytes:
    group = key.group_id.encode()
    return b"".join(
        (_PREFIX, struct.pack(">h", len(group)), group, key.topic_id.bytes,
         struct.pack(">i", key.partition))
    )  # fmt: skip


def decode_key(data: bytes) -> SharePartitionStateKey:
    try:
        (length,) = struct.unpack_from(">h", data, 2)
        if length < 0:  # a null group id: no key of ours has one
            raise RecordDecodeError("negative group id length")
        end = 4 + length
        group = data[4:end].decode()
        topic_id = uuid.UUID(bytes=bytes(data[end : end + 16]))
        (partition,) = struct.unpack_from(">i", data, end + 16)
    except (struct.error, ValueError) as exc:
        raise RecordDecodeError(f"bad share partition state key: {exc}") from exc
    if len(data) != end + 20:
        raise RecordDecodeError("share partition state key has trailing bytes")
    return SharePartitionStateKey(group, topic_id, partition)


def encode_value(value: SharePartitionStateValue) -> bytes:
    s = value.snapshot
    head = _HEAD.pack(
        _VERSION, s.snapshot_epoch, s.state_epoch, s.leader_epoch, s.start_offset,
        len(s.state_batches),
    )  # fmt: skip
    return head + b"".join(
        _BATCH.pack(b.first_offset, b.last_offset, int(b.delivery_state), b.delivery_count)
        for b in s.state_batches
    )


def decode_value(data: bytes) -> SharePartitionStateValue:
    try:
        version, snapshot_epoch, state_epoch, leader_epoch, start, count = _HEAD.unpack_from(data)
        if version != _VERSION:
            raise RecordDecodeError(f"unknown share partition state version {version}")
        if len(data) != _HEAD.size + count * _BATCH.size:
            raise RecordDecodeError("share partition state value has a bad length")
        batches = []
        for i in range(count):
            first, last, state, delivered = _BATCH.unpack_from(data, _HEAD.size + i * _BATCH.size)
            batches.append(StateBatch(first, last, RecordState(state), delivered))
    except (struct.error, ValueError) as exc:
        raise RecordDecodeError(f"bad share partition state value: {exc}") from exc
    complete = sum(
        b.last_offset - max(b.first_offset, start) + 1
        for b in batches
        if b.delivery_state.terminal and b.last_offset >= start
    )
    snapshot = ShareSnapshot(
        snapshot_epoch, state_epoch, leader_epoch, start, complete, tuple(batches)
    )
    return SharePartitionStateValue(snapshot)

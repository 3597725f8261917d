"""The share-group records (KIP-932): what a share group persists, with their bytes.

Kafka's `ShareGroup*Key/Value` coordinator records (group-coordinator/src/main/resources/common/
message/, Kafka 4.4), field for field, with Kafka's record type numbers in `RECORD_TYPES` (the
key's "apiKey", written as the key's version on `__consumer_offsets`):

    10 ShareGroupMemberMetadata          a member's rack, client id, host and topic names
    11 ShareGroupMetadata                group epoch + KIP-1101 metadata hash
    12 ShareGroupTargetAssignmentMetadata the target assignment epoch
    13 ShareGroupTargetAssignmentMember  a member's target assignment
    14 ShareGroupCurrentMemberAssignment a member's epochs, state and assignment

A value of None is a tombstone. Type 15 (ShareGroupStatePartitionMetadata: which partitions the
share coordinator initialized) is not written: groupcoord keeps the share state itself, so every
assigned partition is initialized at once (see coordinator.core.share.coordinator).

Encoding reuses the consumer-group codec's primitives: the same flexible v0 layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.core.consumer import codec as cc
from coordinator.core.consumer.records import TopicPartitions

__all__ = [
    "RECORD_TYPES",
    "SHARE_RECORD_TYPES",
    "ShareGroupCurrentMemberAssignmentKey",
    "ShareGroupCurrentMemberAssignmentValue",
    "ShareGroupKey",
    "ShareGroupMemberMetadataKey",
    "ShareGroupMemberMetadataValue",
    "ShareGroupMetadataKey",
    "ShareGroupMetadataValue",
    "ShareGroupTargetAssignmentMemberKey",
    "ShareGroupTargetAssignmentMemberValue",
    "ShareGroupTargetAssignmentMetadataKey",
    "ShareGroupTargetAssignmentMetadataValue",
    "ShareGroupValue",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMemberMetadataValue:
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]  # sorted


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # a regular field in type 11 (not tagged as in type 3)


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupTargetAssignmentMemberValue:
    topic_partitions: tuple[TopicPartitions, ...]


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ShareGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState id; a share member is always STABLE (0)
    assigned_partitions: tuple[TopicPartitions, ...]


ShareGroupKey = (
    ShareGroupMemberMetadataKey
    | ShareGroupMetadataKey
    | ShareGroupTargetAssignmentMetadataKey
    | ShareGroupTargetAssignmentMemberKey
    | ShareGroupCurrentMemberAssignmentKey
)
ShareGroupValue = (
    ShareGroupMemberMetadataValue
    | ShareGroupMetadataValue
    | ShareGroupTargetAssignmentMetadataValue
    | ShareGroupTargetAssignmentMemberValue
    | ShareGroupCurrentMemberAssignmentValue
)

RECORD_TYPES: dict[type, int] = {
    ShareGroupMemberMetadataKey: 10,
    ShareGroupMetadataKey: 11,
    ShareGroupTargetAssignmentMetadataKey: 12,
    ShareGroupTargetAssignmentMemberKey: 13,
    ShareGroupCurrentMemberAssignmentKey: 14,
}
SHARE_RECORD_TYPES: frozenset[int] = frozenset(RECORD_TYPES.values())
_MEMBER_KEYS = (
    ShareGroupMemberMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupCurrentMemberAssignmentKey,
)


def encode_key(key: ShareGroupKey) -> bytes:
    out = cc._H.pack(RECORD_TYPES[type(key)]) + cc._key_string(key.group_id)
    if isinstance(key, _MEMBER_KEYS):
        out += cc._key_string(key.member_id)
    return out


def encode_value(value: ShareGroupValue) -> bytes:
    version = cc._H.pack(0)
    tps = cc._topic_partitions
    match value:
        case ShareGroupMemberMetadataValue():
            return b"".join(
                (version, cc._cstring(value.rack_id), cc._cstring(value.client_id),
                 cc._cstring(value.client_host),
                 cc._carray(value.subscribed_topic_names, cc._cstring), cc._NO_TAGS)
            )  # fmt: skip
        case ShareGroupMetadataValue():
            return version + cc._I.pack(value.epoch) + cc._Q.pack(value.metadata_hash) + cc._NO_TAGS
        case ShareGroupTargetAssignmentMetadataValue():
            return version + cc._I.pack(value.assignment_epoch) + cc._NO_TAGS
        case ShareGroupTargetAssignmentMemberValue():
            return version + cc._carray(value.topic_partitions, tps) + cc._NO_TAGS
        case ShareGroupCurrentMemberAssignmentValue():
            return b"".join(
                (version, cc._I.pack(value.member_epoch), cc._I.pack(value.previous_member_epoch),
                 cc._B.pack(value.state), cc._carray(value.assigned_partitions, tps), cc._NO_TAGS)
            )  # fmt: skip
    raise TypeError(f"not a share-group record value: {value!r}")


def decode_key(record_type: int, key: bytes) -> ShareGroupKey:
    r = cc._Reader(key, 2)
    gid = r.key_string()
    k: ShareGroupKey
    match record_type:
        case 10:
            k = ShareGroupMemberMetadataKey(gid, r.key_string())
        case 11:
            k = ShareGroupMetadataKey(gid)
        case 12:
            k = ShareGroupTargetAssignmentMetadataKey(gid)
        case 13:
            k = ShareGroupTargetAssignmentMemberKey(gid, r.key_string())
        case 14:
            k = ShareGroupCurrentMemberAssignmentKey(gid, r.key_string())
        case _:
            raise cc.ConsumerCodecError(f"not a share-group record type: {record_type}")
    r.done()
    return k


def decode_value(key: ShareGroupKey, value: bytes) -> ShareGroupValue:
    r = cc._Reader(value, 0)
    version: int = cc._H.unpack(r.take(2))[0]
    if version != 0:
        raise cc.ConsumerCodecError(f"unknown {type(key).__name__} value version {version}")
    v: ShareGroupValue
    match key:
        case ShareGroupMemberMetadataKey():
            v = ShareGroupMemberMetadataValue(
                r.cstring(), r.string(), r.string(), r.array(r.string)
            )
        case ShareGroupMetadataKey():
            v = ShareGroupMetadataValue(r.int32(), r.int64())
        case ShareGroupTargetAssignmentMetadataKey():
            v = ShareGroupTargetAssignmentMetadataValue(r.int32())  # tag 0: AssignmentTimestamp
        case ShareGroupTargetAssignmentMemberKey():
            v = ShareGroupTargetAssignmentMemberValue(r.array(lambda: cc._read_topic_partitions(r)))
        case ShareGroupCurrentMemberAssignmentKey():
            v = ShareGroupCurrentMemberAssignmentValue(
                r.int32(), r.int32(), r.int8(), r.array(lambda: cc._read_topic_partitions(r))
            )
    r.tags()
    r.done()
    return v

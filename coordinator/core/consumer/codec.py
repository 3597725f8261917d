"""Byte encoding of the consumer-group records (record types 3-8 and 16), as Kafka 4.1 writes them
in `__consumer_offsets` (CoordinatorRecordSerde; group-coordinator/src/main/resources/common/
message/ConsumerGroup*.json).

Key   = int16 record type, then the key at version 0, non-flexible: int16-length strings.
        3, 4, 6: GroupId; 5, 7, 8: GroupId, MemberId; 16: GroupId, RegularExpression.
Value = int16 value version (0), then the value at version 0, which is flexible (KIP-482):
        compact strings and arrays (unsigned varint length + 1, 0 = null), uuids as 16 bytes,
        and a tagged-field section after every struct.

Tagged fields: ConsumerGroupMetadataValue's MetadataHash (tag 0, KIP-1101) is written when it is
not 0, and ConsumerGroupMemberMetadataValue's ClassicMemberMetadata (tag 0, a nullable struct:
size + 1, the byte 1, then the struct) when it is not null, as Kafka does; every other tagged
field (AssignmentEpochs of the TopicPartitions of types 7 and 8, AssignmentTimestamp of type 6)
is skipped when read and never written (coordinator.core.consumer.records says why). Type 4's
per-partition racks are read and dropped (the value is only a flag for us).

coordinator.core.record_codec dispatches these record types here; ConsumerCodecError (bad bytes,
an unknown value version) becomes its RecordDecodeError, so loading fails as for any known type.
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable
from typing import TypeVar, assert_never

from coordinator.core.consumer.records import (
    RECORD_TYPES,
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
    PartitionMetadataTopic,
    TopicPartitions,
)

__all__ = ["CONSUMER_RECORD_TYPES", "ConsumerCodecError", "decode_key", "decode_value",
           "encode_key", "encode_value"]  # fmt: skip

CONSUMER_RECORD_TYPES: frozenset[int] = frozenset(RECORD_TYPES.values())

_H = struct.Struct(">h")
_B = struct.Struct(">b")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_NO_TAGS = b"\x00"
_T = TypeVar("_T")


class ConsumerCodecError(ValueError):
    """Bytes that are not a consumer-group record of a known version."""


# -- encoding ------------------------------------------------------------------------------------


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _key_string(s: str) -> bytes:
    data = s.encode()
    if len(data) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return _H.pack(len(data)) + data


def _cstring(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    data = s.encode()
    return _uvarint(len(data) + 1) + data


def _carray(items: tuple[_T, ...], encode: Callable[[_T], bytes]) -> bytes:
    return _uvarint(len(items) + 1) + b"".join(encode(i) for i in items)


def _int32(n: int) -> bytes:
    return _I.pack(n)


def _cbytes(data: bytes) -> bytes:
    return _uvarint(len(data) + 1) + data


def _classic_member_metadata(value: ClassicMemberMetadata | None) -> bytes:
    """The tagged-field section of type 5: tag 0 when the member uses the classic protocol."""
    if value is None:
        return _NO_TAGS
    protocols = _carray(
        value.supported_protocols, lambda p: _cstring(p.name) + _cbytes(p.metadata) + _NO_TAGS
    )
    struct_bytes = _I.pack(value.session_timeout_ms) + protocols + _NO_TAGS
    # One tagged field, tag 0, its size (the struct + the nullable struct's presence byte).
    return b"\x01\x00" + _uvarint(len(struct_bytes) + 1) + b"\x01" + struct_bytes


def _topic_partitions(tp: TopicPartitions) -> bytes:
    return tp.topic_id.bytes + _carray(tp.partitions, _int32) + _NO_TAGS


def encode_key(key: ConsumerGroupKey) -> bytes:
    parts = [_H.pack(RECORD_TYPES[type(key)]), _key_string(key.group_id)]
    if isinstance(
        key,
        ConsumerGroupMemberMetadataKey
        | ConsumerGroupTargetAssignmentMemberKey
        | ConsumerGroupCurrentMemberAssignmentKey,
    ):
        parts.append(_key_string(key.member_id))
    elif isinstance(key, ConsumerGroupRegularExpressionKey):
        parts.append(_key_string(key.regular_expression))
    return b"".join(parts)


def encode_value(value: ConsumerGroupValue) -> bytes:
    version = _H.pack(0)
    match value:
        case ConsumerGroupMetadataValue():
            tags = _NO_TAGS
            if value.metadata_hash:  # tagged field 0, written only when not the default
                tags = b"\x01\x00\x08" + _Q.pack(value.metadata_hash)
            return version + _I.pack(value.epoch) + tags
        case ConsumerGroupPartitionMetadataValue():
            topics = _carray(
                value.topics,
                lambda t: t.topic_id.bytes + _cstring(t.topic_name) + _I.pack(t.num_partitions)
                + b"\x01" + _NO_TAGS,  # no partition racks
            )  # fmt: skip
            return version + topics + _NO_TAGS
        case ConsumerGroupMemberMetadataValue():
            return b"".join(
                (version, _cstring(value.instance_id), _cstring(value.rack_id),
                 _cstring(value.client_id), _cstring(value.client_host),
                 _carray(value.subscribed_topic_names, _cstring),
                 _cstring(value.subscribed_topic_regex), _I.pack(value.rebalance_timeout_ms),
                 _cstring(value.server_assignor),
                 _classic_member_metadata(value.classic_member_metadata))
            )  # fmt: skip
        case ConsumerGroupTargetAssignmentMetadataValue():
            return version + _I.pack(value.assignment_epoch) + _NO_TAGS
        case ConsumerGroupTargetAssignmentMemberValue():
            return version + _carray(value.topic_partitions, _topic_partitions) + _NO_TAGS
        case ConsumerGroupCurrentMemberAssignmentValue():
            return b"".join(
                (version, _I.pack(value.member_epoch), _I.pack(value.previous_member_epoch),
                 _B.pack(value.state), _carray(value.assigned_partitions, _topic_partitions),
                 _carray(value.partitions_pending_revocation, _topic_partitions), _NO_TAGS)
            )  # fmt: skip
        case ConsumerGroupRegularExpressionValue():
            return b"".join(
                (version, _carray(value.topics, _cstring), _Q.pack(value.version),
                 _Q.pack(value.timestamp_ms), _NO_TAGS)
            )  # fmt: skip
    raise TypeError(f"not a consumer-group record value: {value!r}")


# -- decoding ------------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise ConsumerCodecError("truncated record")
        data = self.buf[self.pos : end]
        self.pos = end
        return data

    def int8(self) -> int:
        v: int = _B.unpack(self.take(1))[0]
        return v

    def int32(self) -> int:
        v: int = _I.unpack(self.take(4))[0]
        return v

    def int64(self) -> int:
        v: int = _Q.unpack(self.take(8))[0]
        return v

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1)[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift >= 35:
                raise ConsumerCodecError("varint longer than 5 bytes")

    def key_string(self) -> str:
        n: int = _H.unpack(self.take(2))[0]
        return self._text(n)

    def _text(self, n: int) -> str:
        try:
            return self.take(n).decode()
        except UnicodeDecodeError as e:
            raise ConsumerCodecError(str(e)) from e

    def cstring(self) -> str | None:
        n = self.uvarint()
        return None if n == 0 else self._text(n - 1)

    def string(self) -> str:
        s = self.cstring()
        if s is None:
            raise ConsumerCodecError("null where a string is required")
        return s

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16))

    def bytes_(self) -> bytes:
        n = self.uvarint()
        if n == 0:
            raise ConsumerCodecError("null where bytes are required")
        return self.take(n - 1)

    def array(self, read: Callable[[], _T]) -> tuple[_T, ...]:
        n = self.uvarint()
        if n == 0:
            raise ConsumerCodecError("null where an array is required")
        if n - 1 > len(self.buf) - self.pos:  # every element takes a byte or more
            raise ConsumerCodecError(f"bad array length {n - 1}")
        return tuple(read() for _ in range(n - 1))

    def tags(self) -> dict[int, bytes]:
        out: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self.take(self.uvarint())
        return out

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise ConsumerCodecError(f"{len(self.buf) - self.pos} trailing bytes")


def decode_key(record_type: int, key: bytes) -> ConsumerGroupKey:
    r = _Reader(key, 2)
    gid = r.key_string()
    k: ConsumerGroupKey
    match record_type:
        case 3:
            k = ConsumerGroupMetadataKey(gid)
        case 4:
            k = ConsumerGroupPartitionMetadataKey(gid)
        case 5:
            k = ConsumerGroupMemberMetadataKey(gid, r.key_string())
        case 6:
            k = ConsumerGroupTargetAssignmentMetadataKey(gid)
        case 7:
            k = ConsumerGroupTargetAssignmentMemberKey(gid, r.key_string())
        case 8:
            k = ConsumerGroupCurrentMemberAssignmentKey(gid, r.key_string())
        case 16:
            k = ConsumerGroupRegularExpressionKey(gid, r.key_string())
        case _:
            raise ConsumerCodecError(f"not a consumer-group record type: {record_type}")
    r.done()
    return k


def _read_topic_partitions(r: _Reader) -> TopicPartitions:
    tp = TopicPartitions(r.uuid(), r.array(r.int32))
    r.tags()  # AssignmentEpochs (KIP-1251), not kept
    return tp


def _read_partition_metadata_topic(r: _Reader) -> PartitionMetadataTopic:
    topic = PartitionMetadataTopic(r.uuid(), r.string(), r.int32())

    def partition_racks() -> None:
        r.int32()
        r.array(r.string)
        r.tags()

    r.array(partition_racks)
    r.tags()
    return topic


def _read_classic_member_metadata(tag: bytes) -> ClassicMemberMetadata | None:
    r = _Reader(tag, 0)
    if r.int8() < 0:  # the nullable struct's presence byte: -1 = null
        r.done()
        return None

    def protocol() -> ClassicProtocol:
        p = ClassicProtocol(r.string(), r.bytes_())
        r.tags()
        return p

    value = ClassicMemberMetadata(r.int32(), r.array(protocol))
    r.tags()
    r.done()
    return value


def decode_value(key: ConsumerGroupKey, value: bytes) -> ConsumerGroupValue:
    r = _Reader(value, 0)
    version: int = _H.unpack(r.take(2))[0]
    if version != 0:
        raise ConsumerCodecError(f"unknown {type(key).__name__} value version {version}")
    v: ConsumerGroupValue
    match key:
        case ConsumerGroupMetadataKey():
            epoch = r.int32()
            tag = r.tags().get(0)
            if tag is not None and len(tag) != 8:
                raise ConsumerCodecError("MetadataHash is not 8 bytes")
            v = ConsumerGroupMetadataValue(epoch, _Q.unpack(tag)[0] if tag is not None else 0)
        case ConsumerGroupPartitionMetadataKey():
            v = ConsumerGroupPartitionMetadataValue(
                r.array(lambda: _read_partition_metadata_topic(r))
            )
            r.tags()
        case ConsumerGroupMemberMetadataKey():
            v = ConsumerGroupMemberMetadataValue(
                instance_id=r.cstring(),
                rack_id=r.cstring(),
                client_id=r.string(),
                client_host=r.string(),
                subscribed_topic_names=r.array(r.string),
                subscribed_topic_regex=r.cstring(),
                rebalance_timeout_ms=r.int32(),
                server_assignor=r.cstring(),
            )
            tag = r.tags().get(0)
            if tag is not None:
                classic = _read_classic_member_metadata(tag)
                v = dataclasses.replace(v, classic_member_metadata=classic)
        case ConsumerGroupTargetAssignmentMetadataKey():
            v = ConsumerGroupTargetAssignmentMetadataValue(r.int32())
            r.tags()  # AssignmentTimestamp, not kept
        case ConsumerGroupTargetAssignmentMemberKey():
            v = ConsumerGroupTargetAssignmentMemberValue(r.array(lambda: _read_topic_partitions(r)))
            r.tags()
        case ConsumerGroupCurrentMemberAssignmentKey():
            v = ConsumerGroupCurrentMemberAssignmentValue(
                r.int32(),
                r.int32(),
                r.int8(),
                r.array(lambda: _read_topic_partitions(r)),
                r.array(lambda: _read_topic_partitions(r)),
            )
            r.tags()
        case ConsumerGroupRegularExpressionKey():
            v = ConsumerGroupRegularExpressionValue(r.array(r.string), r.int64(), r.int64())
            r.tags()
        case _:
            assert_never(key)
    r.done()
    return v

"""Consumer-group record bytes only Kafka writes, pinned where `make mutation` found their
reading loose (the codec's own records never take these paths): record type 4
(ConsumerGroupPartitionMetadata, written by Kafka 4.0 and before; superseded by the metadata hash
of KIP-1101) with each topic's partitions and their racks, which the codec reads and drops; and
type 5's ClassicMemberMetadata tag, a nullable struct whose presence byte Kafka reads as null
only when negative."""

from __future__ import annotations

import struct
import uuid

import pytest

from coordinator.core.consumer.codec import ConsumerCodecError, decode_value, encode_value
from coordinator.core.consumer.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    PartitionMetadataTopic,
)
from tests.core.test_pin_consumer_codec import kafka_uvarint


def compact(text: str) -> bytes:
    return kafka_uvarint(len(text.encode()) + 1) + text.encode()


def test_kafka_40s_partition_metadata_with_racks_is_read() -> None:
    tid = uuid.UUID(int=0x1234_5678)
    racks = {0: ("rack-a", "rack-b"), 1: ("rack-c",)}
    partitions = kafka_uvarint(len(racks) + 1) + b"".join(
        struct.pack(">i", p) + kafka_uvarint(len(rs) + 1) + b"".join(compact(r) for r in rs)
        + b"\x00"  # the partition's tagged fields
        for p, rs in racks.items()
    )  # fmt: skip
    topic = tid.bytes + compact("orders") + struct.pack(">i", 2) + partitions + b"\x00"
    data = struct.pack(">h", 0) + kafka_uvarint(2) + topic + b"\x00"
    value = decode_value(ConsumerGroupPartitionMetadataKey("g"), data)
    assert value == ConsumerGroupPartitionMetadataValue((PartitionMetadataTopic(tid, "orders", 2),))


def _member(classic: ClassicMemberMetadata | None) -> ConsumerGroupMemberMetadataValue:
    return ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), "", 300, None, classic)


MEMBER_KEY = ConsumerGroupMemberMetadataKey("g", "m")
CLASSIC = ClassicMemberMetadata(6_000, (ClassicProtocol("range", b""),))


def test_a_classic_member_metadata_presence_byte_of_zero_is_present() -> None:
    """Kafka reads a nullable struct as null only when its first byte is negative."""
    plain, tagged = encode_value(_member(None)), encode_value(_member(CLASSIC))
    presence = len(plain) - 1 + 3  # after the tag count, the tag and its (one-byte) size
    assert tagged[presence] == 1
    zero = tagged[:presence] + b"\x00" + tagged[presence + 1 :]
    assert decode_value(MEMBER_KEY, zero) == _member(CLASSIC)
    null = encode_value(_member(None))[:-1] + b"\x01\x00\x01\xff"  # tag 0: the byte -1
    assert decode_value(MEMBER_KEY, null) == _member(None)


def test_a_classic_protocol_with_null_metadata_is_refused_saying_so() -> None:
    tagged = encode_value(_member(CLASSIC))
    assert tagged.count(b"\x06range\x01") == 1
    damaged = tagged.replace(b"\x06range\x01", b"\x06range\x00")
    with pytest.raises(ConsumerCodecError) as refused:
        decode_value(MEMBER_KEY, damaged)
    assert str(refused.value) == "null where bytes are required"

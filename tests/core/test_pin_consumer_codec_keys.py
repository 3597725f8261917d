"""KIP-848 record keys and value headers (coordinator.core.consumer.codec), pinned where
`make mutation` found them loose: every key type reads back from its own record type, and a
value the codec refuses says why in the words the load log prints (an unknown value version
names the record, a MetadataHash that is not an int64 says so)."""

from __future__ import annotations

import struct

import pytest

from coordinator.core.consumer.codec import ConsumerCodecError, decode_key, decode_value, encode_key
from coordinator.core.consumer.records import (
    RECORD_TYPES,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)


@pytest.mark.parametrize("key", [
    ConsumerGroupMetadataKey("g"),
    ConsumerGroupPartitionMetadataKey("g"),
    ConsumerGroupMemberMetadataKey("g", "m"),
    ConsumerGroupTargetAssignmentMetadataKey("g"),
    ConsumerGroupTargetAssignmentMemberKey("g", "m"),
    ConsumerGroupCurrentMemberAssignmentKey("g", "m"),
    ConsumerGroupRegularExpressionKey("g", "^o.*"),
])
def test_every_key_type_reads_back_from_its_record_type(key: ConsumerGroupKey) -> None:
    record_type = RECORD_TYPES[type(key)]
    assert decode_key(record_type, encode_key(key)) == key


def test_an_unknown_value_version_names_the_record_and_the_version() -> None:
    with pytest.raises(ConsumerCodecError) as refused:
        decode_value(ConsumerGroupMetadataKey("g"), struct.pack(">hi", 1, 5) + b"\x00")
    assert str(refused.value) == "unknown ConsumerGroupMetadataKey value version 1"


def test_a_metadata_hash_of_other_than_8_bytes_is_refused_by_name() -> None:
    key = ConsumerGroupMetadataKey("g")
    good = struct.pack(">hi", 0, 5) + b"\x01\x00\x08" + struct.pack(">q", 42)
    assert decode_value(key, good) == ConsumerGroupMetadataValue(5, 42)
    with pytest.raises(ConsumerCodecError) as refused:
        decode_value(key, struct.pack(">hi", 0, 5) + b"\x01\x00\x04" + struct.pack(">i", 42))
    assert str(refused.value) == "MetadataHash is not 8 bytes"


MEMBER_HEAD = struct.pack(">h", 0) + b"\x00\x00" + b"\x02c" + b"\x03/h"  # then the topic names


@pytest.mark.parametrize(("array", "message"), [
    (b"\x04\x01\x01", "bad array length 3"),  # three elements, two bytes left
    (b"\x03\x01\x01", "truncated record"),  # two empty names fit, the regex after them does not
])
def test_an_array_longer_than_the_bytes_left_is_refused_before_reading_it(
    array: bytes, message: str
) -> None:
    with pytest.raises(ConsumerCodecError) as refused:
        decode_value(ConsumerGroupMemberMetadataKey("g", "m"), MEMBER_HEAD + array)
    assert str(refused.value) == message

"""KIP-848 record values (coordinator.core.consumer.codec), pinned where `make mutation` found
them loose: compact lengths of 128 and more (unsigned varints of two and three bytes, as
Kafka's ByteUtils.writeUnsignedVarint writes them), varints Kafka would refuse, and the key
strings' int16 limit."""

from __future__ import annotations

import struct

import pytest

from coordinator.core.consumer.codec import (
    ConsumerCodecError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from coordinator.core.consumer.records import (
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
)


def kafka_uvarint(n: int) -> bytes:
    """ByteUtils.writeUnsignedVarint, transcribed."""
    out = bytearray()
    while n & 0xFFFFFF80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


KEY = ConsumerGroupMemberMetadataKey("g", "m")


@pytest.mark.parametrize("length", [0, 1, 126, 127, 128, 129, 255, 16_382, 16_383, 16_384, 70_000])
def test_a_long_client_id_is_a_compact_string_with_a_kafka_varint_length(length: int) -> None:
    client_id = "x" * length
    value = ConsumerGroupMemberMetadataValue(None, None, client_id, "/h", ("t",), "", 300, None)
    encoded = encode_value(value)
    assert encoded[:4] == struct.pack(">h", 0) + b"\x00\x00"  # version, null rack, null instance
    header = kafka_uvarint(length + 1)
    assert encoded[4:4 + len(header) + length] == header + client_id.encode()
    assert decode_value(KEY, encoded) == value


@pytest.mark.parametrize(("varint", "problem"), [
    (b"\x80\x80\x80\x80\x80\x01", "varint longer than 5 bytes"),
    (b"\xff\xff\xff\xff\x7f", None),  # five bytes: read (then too long for the record)
    (b"\x80", "truncated record"),
])
def test_varints_kafka_refuses_are_refused(varint: bytes, problem: str | None) -> None:
    data = struct.pack(">h", 0) + b"\x00\x00" + varint
    with pytest.raises(ConsumerCodecError) as refused:
        decode_value(KEY, data)
    if problem is not None:
        assert str(refused.value) == problem


def test_key_strings_are_int16_prefixed_up_to_32767_bytes() -> None:
    assert encode_key(ConsumerGroupMetadataKey("g" * 32_767))[4:] == b"g" * 32_767
    with pytest.raises(ValueError, match=r"^string longer than 32767 bytes$"):
        encode_key(ConsumerGroupMetadataKey("g" * 32_768))


MEMBER_VALUE = struct.pack(">h", 0) + b"\x00\x00" + b"\x02c" + b"\x03/h" + b"\x02\x02t" + b"\x01" \
    + struct.pack(">i", 300) + b"\x00" + b"\x00"


@pytest.mark.parametrize(("data", "message"), [
    (struct.pack(">h", 0) + b"\x00\x00\x00", "null where a string is required"),
    (struct.pack(">h", 0) + b"\x00\x00\x02c\x03/h\x00", "null where an array is required"),
    (struct.pack(">h", 0) + b"\x00\x00\x02c\x03/h", "truncated record"),
    (MEMBER_VALUE + b"\x00\x00\x00", "3 trailing bytes"),
])
def test_a_damaged_value_is_refused_saying_what_is_wrong(data: bytes, message: str) -> None:
    """The message is what the load log says of the record."""
    assert decode_value(KEY, MEMBER_VALUE).client_id == "c"  # type: ignore[union-attr]
    with pytest.raises(ConsumerCodecError) as refused:
        decode_value(KEY, data)
    assert str(refused.value) == message


def test_unknown_record_types_and_values_are_refused_by_name() -> None:
    with pytest.raises(ConsumerCodecError, match=r"^not a consumer-group record type: 99$"):
        decode_key(99, struct.pack(">hh", 99, 1) + b"g")
    with pytest.raises(TypeError, match=r"^not a consumer-group record value: 'nope'$"):
        encode_value("nope")  # type: ignore[arg-type]

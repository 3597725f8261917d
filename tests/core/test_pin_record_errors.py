"""The record codec's limits and its error messages, pinned where mutation testing found them
loose (issue 28, `make mutation`).

A string field holds at most 32767 bytes (its int16 length; Kafka's `STRING`), checked at 32767
and 32768. A damaged record is reported with what is wrong (the loader logs it with the record's
place in the log), so the messages are compared whole.
"""

from __future__ import annotations

import struct

import pytest

from coordinator.core import record_codec
from coordinator.core.record_codec import (
    RecordDecodeError,
    decode_key,
    encode_key,
    encode_value,
    record_type,
)
from coordinator.core.records import GroupMetadataKey, OffsetCommitKey

GROUP = struct.pack(">h", 2)  # the GroupMetadata key type


def test_a_string_holds_at_most_32767_bytes() -> None:
    # Group ids and topics are cached once encoded (per process): start from a cold cache, or
    # a string another test encoded would never reach the check.
    record_codec._string_cache.clear()
    longest = "g" * 0x7FFF
    assert encode_key(GroupMetadataKey(longest)) == GROUP + struct.pack(">h", 0x7FFF) + (
        longest.encode()
    )
    with pytest.raises(ValueError, match=r"^string longer than 32767 bytes$"):
        encode_key(GroupMetadataKey("g" * 0x8000))
    with pytest.raises(ValueError, match=r"^string longer than 32767 bytes$"):
        encode_key(OffsetCommitKey("g", "t" * 0x8000, 0))  # the cached path too


def test_the_record_type_is_the_first_two_bytes() -> None:
    assert record_type(b"\x00\x02") == 2
    assert record_type(b"\x00\x07rest") == 7
    for short in (b"", b"\x00"):
        with pytest.raises(RecordDecodeError, match=r"^key shorter than its record type$"):
            record_type(short)


def test_decode_errors_say_what_is_wrong() -> None:
    cases = [
        (GROUP + struct.pack(">h", 5) + b"ab", r"^truncated record$"),
        (GROUP + struct.pack(">h", 1) + b"gxyz", r"^3 trailing bytes$"),
        (GROUP + struct.pack(">h", -1), r"^null where a string is required$"),
        (GROUP + struct.pack(">h", 1) + b"\xff", r"^'utf-8' codec can't decode byte 0xff"),
    ]
    for key, message in cases:
        with pytest.raises(RecordDecodeError, match=message):
            decode_key(key)


def test_only_record_types_are_encoded() -> None:
    with pytest.raises(TypeError, match=r"^not a record key: 5$"):
        encode_key(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^not a record value: 'v'$"):
        encode_value("v")  # type: ignore[arg-type]


def test_a_damaged_consumer_or_share_group_record_says_what_is_wrong() -> None:
    """The consumer and share groups' codecs raise their own errors: the record codec reports
    them as a RecordDecodeError with their message (issue 36: `decode_key`, `decode_record`)."""
    from coordinator.core.consumer.records import ConsumerGroupMetadataKey
    from coordinator.core.share.records import ShareGroupMetadataKey

    for key_type in (3, 10):  # ConsumerGroupMetadata, ShareGroupMetadata
        with pytest.raises(RecordDecodeError, match=r"^truncated record$"):
            decode_key(struct.pack(">h", key_type) + struct.pack(">h", 5) + b"ab")
    for key in (ConsumerGroupMetadataKey("g"), ShareGroupMetadataKey("g")):
        with pytest.raises(RecordDecodeError, match=r"^truncated record$"):
            record_codec.decode_record(encode_key(key), b"\x00")

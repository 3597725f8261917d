"""KIP-848 record strings that are not UTF-8 (coordinator.core.consumer.codec), pinned where
`make mutation` found them loose: a key's or a value's string that does not decode is refused
as a damaged record, saying where the decoding failed (the words the load log prints)."""

from __future__ import annotations

import struct

import pytest

from coordinator.core.consumer.codec import ConsumerCodecError, decode_key, decode_value
from coordinator.core.consumer.records import ConsumerGroupMemberMetadataKey

NOT_UTF8 = "'utf-8' codec can't decode byte 0xff in position 1: invalid start byte"


def test_a_key_string_that_is_not_utf8_is_refused_saying_where() -> None:
    key = struct.pack(">hh", 3, 2) + b"g\xff"
    with pytest.raises(ConsumerCodecError) as refused:
        decode_key(3, key)
    assert str(refused.value) == NOT_UTF8


def test_a_value_string_that_is_not_utf8_is_refused_saying_where() -> None:
    # MemberMetadata v0: null rack, null instance id, then the client id "c\xff".
    value = struct.pack(">h", 0) + b"\x00\x00" + b"\x03c\xff"
    with pytest.raises(ConsumerCodecError) as refused:
        decode_value(ConsumerGroupMemberMetadataKey("g", "m"), value)
    assert str(refused.value) == NOT_UTF8

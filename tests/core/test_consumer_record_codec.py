"""The consumer-group records (types 3-8, 16) in record_codec: round trips, Kafka's byte layout
(non-flexible v0 keys, flexible v0 values), tagged fields skipped, bad bytes refused."""

from __future__ import annotations

import contextlib
import struct
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.consumer.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
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
    PartitionMetadataTopic,
    TopicPartitions,
)
from coordinator.core.record_codec import (
    RecordDecodeError,
    decode_record,
    encode_key,
    encode_record,
    encode_value,
)
from coordinator.core.records import Record

names = st.text(max_size=12)
nullable = st.none() | names
int8 = st.integers(-128, 127)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
uuids = st.uuids()
small_tuple = lambda s: st.lists(s, max_size=4).map(tuple)  # noqa: E731
topic_partitions = st.builds(TopicPartitions, uuids, small_tuple(st.integers(0, 2**31 - 1)))
classic_metadata = st.none() | st.builds(
    ClassicMemberMetadata,
    int32,
    small_tuple(st.builds(ClassicProtocol, names, st.binary(max_size=8))),
)

pairs = st.one_of(
    st.tuples(
        st.builds(ConsumerGroupMetadataKey, names),
        st.builds(ConsumerGroupMetadataValue, int32, int64),
    ),
    st.tuples(
        st.builds(ConsumerGroupPartitionMetadataKey, names),
        st.builds(
            ConsumerGroupPartitionMetadataValue,
            small_tuple(st.builds(PartitionMetadataTopic, uuids, names, int32)),
        ),
    ),
    st.tuples(
        st.builds(ConsumerGroupMemberMetadataKey, names, names),
        st.builds(
            ConsumerGroupMemberMetadataValue,
            nullable,
            nullable,
            names,
            names,
            small_tuple(names),
            nullable,
            int32,
            nullable,
            classic_metadata,
        ),
    ),
    st.tuples(
        st.builds(ConsumerGroupTargetAssignmentMetadataKey, names),
        st.builds(ConsumerGroupTargetAssignmentMetadataValue, int32),
    ),
    st.tuples(
        st.builds(ConsumerGroupTargetAssignmentMemberKey, names, names),
        st.builds(ConsumerGroupTargetAssignmentMemberValue, small_tuple(topic_partitions)),
    ),
    st.tuples(
        st.builds(ConsumerGroupCurrentMemberAssignmentKey, names, names),
        st.builds(
            ConsumerGroupCurrentMemberAssignmentValue,
            int32,
            int32,
            int8,
            small_tuple(topic_partitions),
            small_tuple(topic_partitions),
        ),
    ),
    st.tuples(
        st.builds(ConsumerGroupRegularExpressionKey, names, names),
        st.builds(ConsumerGroupRegularExpressionValue, small_tuple(names), int64, int64),
    ),
)


@given(pairs, st.booleans())
def test_round_trip(pair: tuple[object, object], tombstone: bool) -> None:
    key, value = pair
    record = Record(key, None if tombstone else value)  # type: ignore[arg-type]
    assert decode_record(*encode_record(record)) == record


@given(pairs, st.data())
def test_truncated_or_extended_values_are_refused(
    pair: tuple[object, object], data: st.DataObject
) -> None:
    key, value = pair
    k = encode_key(key)  # type: ignore[arg-type]
    v = encode_value(value)  # type: ignore[arg-type]
    cut = data.draw(st.integers(0, len(v) - 1))
    with pytest.raises(RecordDecodeError):
        decode_record(k, v[:cut])
    with pytest.raises(RecordDecodeError):
        decode_record(k, v + b"\x00")


@given(st.binary(max_size=40), st.sampled_from([3, 4, 5, 6, 7, 8, 16]))
def test_arbitrary_bytes_decode_or_raise(data: bytes, record_type: int) -> None:
    key = encode_key(ConsumerGroupMetadataKey("g"))
    key = struct.pack(">h", record_type) + key[2:]
    with contextlib.suppress(RecordDecodeError):
        decode_record(key, data)


def _s(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def test_kafka_layout() -> None:
    """Keys: int16 type + int16-length strings. Values: int16 version 0, then compact fields
    (length + 1 as an unsigned varint) and a tagged-field section (here: none, or the
    MetadataHash as tag 0)."""
    assert encode_key(ConsumerGroupMemberMetadataKey("g", "m")) == struct.pack(">h", 5) + _s(
        "g"
    ) + _s("m")
    assert encode_key(ConsumerGroupRegularExpressionKey("g", "t.*")) == struct.pack(">h", 16) + _s(
        "g"
    ) + _s("t.*")
    assert encode_value(ConsumerGroupMetadataValue(7)) == struct.pack(">hi", 0, 7) + b"\x00"
    hashed = encode_value(ConsumerGroupMetadataValue(7, 9))
    assert hashed == struct.pack(">hi", 0, 7) + b"\x01\x00\x08" + struct.pack(">q", 9)
    tid = uuid.UUID(int=1)
    value = encode_value(
        ConsumerGroupCurrentMemberAssignmentValue(3, 2, 1, (TopicPartitions(tid, (0, 5)),), ())
    )
    assert value == (
        struct.pack(">hiib", 0, 3, 2, 1) + b"\x02" + tid.bytes + b"\x03"
        + struct.pack(">ii", 0, 5) + b"\x00" + b"\x01" + b"\x00"
    )  # fmt: skip
    member = encode_value(
        ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("t",), "", 300, None)
    )
    assert member == (
        struct.pack(">h", 0) + b"\x00\x00" + b"\x02c" + b"\x03/h" + b"\x02\x02t" + b"\x01"
        + struct.pack(">i", 300) + b"\x00" + b"\x00"
    )  # fmt: skip


def test_tagged_fields_kafka_adds_are_skipped() -> None:
    """AssignmentEpochs (tag 0 of TopicPartitions, KIP-1251) is read past."""
    tid = uuid.UUID(int=2)
    key = encode_key(ConsumerGroupTargetAssignmentMemberKey("g", "m"))
    epochs = b"\x01\x00\x06\x02" + struct.pack(">i", 4) + b"\x00"  # one tag: [4]
    raw = struct.pack(">h", 0) + b"\x02" + tid.bytes + b"\x02" + struct.pack(">i", 1)
    raw += epochs + b"\x00"
    assert decode_record(key, raw) == Record(
        ConsumerGroupTargetAssignmentMemberKey("g", "m"),
        ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(tid, (1,)),)),
    )


def test_classic_member_metadata_is_tagged_field_0() -> None:
    """ConsumerGroupMemberMetadataValue's ClassicMemberMetadata (issue 23 item 6), as Kafka's
    generated writer lays out a nullable struct tagged field: one tag, tag 0, size = the struct +
    1, the presence byte 1, then SessionTimeoutMs, the compact array of (Name, Metadata, no tags)
    and the struct's own empty tag section."""
    classic = ClassicMemberMetadata(6000, (ClassicProtocol("range", b"\x00\x01"),))
    value = ConsumerGroupMemberMetadataValue(
        None, None, "c", "/h", ("t",), None, 300, None, classic
    )
    encoded = encode_value(value)
    body = struct.pack(">i", 6000) + b"\x02" + b"\x06range" + b"\x03\x00\x01" + b"\x00" + b"\x00"
    assert encoded.endswith(b"\x01\x00" + bytes([len(body) + 1]) + b"\x01" + body)
    key = encode_key(ConsumerGroupMemberMetadataKey("g", "m"))
    decoded = decode_record(key, encoded)
    assert decoded is not None and decoded.value == value


def test_unknown_value_version_fails() -> None:
    key = encode_key(ConsumerGroupMetadataKey("g"))
    with pytest.raises(RecordDecodeError):
        decode_record(key, struct.pack(">hi", 1, 7) + b"\x00")

"""The share-group records (KIP-932, types 10-14) in record_codec: round trips, Kafka's byte
layout (non-flexible v0 keys, flexible v0 values; type 11's MetadataHash a regular field), bad
bytes refused."""

from __future__ import annotations

import contextlib
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.consumer.records import TopicPartitions
from coordinator.core.record_codec import (
    RecordDecodeError,
    decode_record,
    encode_key,
    encode_record,
    encode_value,
)
from coordinator.core.records import Record
from coordinator.core.share.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)

names = st.text(max_size=12)
int8 = st.integers(-128, 127)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)
small_tuple = lambda s: st.lists(s, max_size=4).map(tuple)  # noqa: E731
topic_partitions = st.builds(TopicPartitions, st.uuids(), small_tuple(st.integers(0, 2**31 - 1)))

pairs = st.one_of(
    st.tuples(
        st.builds(ShareGroupMemberMetadataKey, names, names),
        st.builds(ShareGroupMemberMetadataValue, st.none() | names, names, names,
                  small_tuple(names)),
    ),
    st.tuples(
        st.builds(ShareGroupMetadataKey, names),
        st.builds(ShareGroupMetadataValue, int32, int64),
    ),
    st.tuples(
        st.builds(ShareGroupTargetAssignmentMetadataKey, names),
        st.builds(ShareGroupTargetAssignmentMetadataValue, int32),
    ),
    st.tuples(
        st.builds(ShareGroupTargetAssignmentMemberKey, names, names),
        st.builds(ShareGroupTargetAssignmentMemberValue, small_tuple(topic_partitions)),
    ),
    st.tuples(
        st.builds(ShareGroupCurrentMemberAssignmentKey, names, names),
        st.builds(ShareGroupCurrentMemberAssignmentValue, int32, int32, int8,
                  small_tuple(topic_partitions)),
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


@settings(deadline=None)  # a loaded machine (or mutmut's trampolines) passes 200 ms
@given(st.binary(max_size=40), st.sampled_from([10, 11, 12, 13, 14]))
def test_arbitrary_bytes_decode_or_raise(data: bytes, record_type: int) -> None:
    key = struct.pack(">h", record_type) + encode_key(ShareGroupMemberMetadataKey("g", "m"))[2:]
    with contextlib.suppress(RecordDecodeError):
        decode_record(key, data)


def test_kafka_layout() -> None:
    """Kafka's ShareGroupMetadataKey/Value v0 and ShareGroupCurrentMemberAssignmentValue v0."""
    assert encode_key(ShareGroupMetadataKey("g")) == b"\x00\x0b\x00\x01g"
    assert encode_value(ShareGroupMetadataValue(3, 7)) == (
        b"\x00\x00" + struct.pack(">i", 3) + struct.pack(">q", 7) + b"\x00"
    )
    tid = uuid.UUID(int=5)
    value = ShareGroupCurrentMemberAssignmentValue(2, 1, 0, (TopicPartitions(tid, (0, 1)),))
    assert encode_value(value) == b"".join((
        b"\x00\x00", struct.pack(">ii", 2, 1), b"\x00",  # epochs, state
        b"\x02", tid.bytes, b"\x03", struct.pack(">ii", 0, 1), b"\x00",  # one topic, 2 partitions
        b"\x00",  # the value's tagged fields
    ))  # fmt: skip

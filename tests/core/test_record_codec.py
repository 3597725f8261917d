"""record_codec: Kafka's __consumer_offsets layout, every version read, round trips, bad bytes."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.record_codec import (
    GROUPCOORD_GROUP_V100,
    RecordDecodeError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    decode_record,
    encode_key,
    encode_record,
    encode_value,
)
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
)

names = st.text(max_size=20)
int32 = st.integers(-(2**31), 2**31 - 1)
int64 = st.integers(-(2**63), 2**63 - 1)

offset_keys = st.builds(OffsetCommitKey, names, names, int32)
group_keys = st.builds(GroupMetadataKey, names)
offset_values = st.one_of(
    st.builds(OffsetCommitValue, int64, int32, names, int64, st.none()),
    st.builds(OffsetCommitValue, int64, st.just(-1), names, int64, int64),
)
members = st.builds(
    MemberMetadata, names, st.none() | names, names, names, int32, int32,
    st.binary(max_size=40), st.binary(max_size=40),
)  # fmt: skip
group_values = st.builds(
    GroupMetadataValue, names, int32, st.none() | names, st.none() | names, int64,
    st.lists(members, max_size=4).map(tuple), int64,
)  # fmt: skip
records = st.one_of(
    st.builds(Record, offset_keys, offset_values | st.none()),
    st.builds(Record, group_keys, group_values | st.none()),
)


@given(records)
def test_round_trip(record: Record) -> None:
    key, value = encode_record(record)
    decoded = decode_record(key, value)
    assert decoded == record
    assert type(decoded) is Record
    if decoded is not None:
        assert hash(decoded.key) == hash(record.key)  # frozen dataclasses built by the fast path


def kafka_string(s: str) -> bytes:
    return struct.pack(">h", len(s.encode())) + s.encode()


def test_offset_commit_bytes_match_kafka_v3_layout() -> None:
    key = encode_key(OffsetCommitKey("g", "t", 3))
    assert key == struct.pack(">h", 1) + kafka_string("g") + kafka_string("t") + struct.pack(
        ">i", 3
    )
    value = encode_value(OffsetCommitValue(42, 7, "m", 1000, None))
    assert value == struct.pack(">hqi", 3, 42, 7) + kafka_string("m") + struct.pack(">q", 1000)
    expiring = encode_value(OffsetCommitValue(42, -1, "", 1000, 2000))
    assert expiring == struct.pack(">hq", 1, 42) + kafka_string("") + struct.pack(">qq", 1000, 2000)


def test_group_metadata_written_as_v3_until_a_hash_is_set() -> None:
    v = GroupMetadataValue("consumer", 5, "range", "m1", 99, ())
    assert encode_value(v)[:2] == struct.pack(">h", 3)
    hashed = GroupMetadataValue("consumer", 5, "range", "m1", 99, (), metadata_hash=-17)
    assert encode_value(hashed)[:2] == struct.pack(">h", GROUPCOORD_GROUP_V100)
    assert decode_group_value(encode_value(hashed)) == hashed


def test_older_offset_versions_are_read() -> None:
    v0 = struct.pack(">hq", 0, 10) + kafka_string("meta") + struct.pack(">q", 5)
    assert decode_offset_value(v0) == OffsetCommitValue(10, -1, "meta", 5, None)
    v2 = struct.pack(">hq", 2, 10) + kafka_string("") + struct.pack(">q", 5)
    assert decode_offset_value(v2) == OffsetCommitValue(10, -1, "", 5, None)


def test_group_v0_takes_rebalance_timeout_from_session_timeout() -> None:
    member_v0 = (
        kafka_string("m1") + kafka_string("client") + kafka_string("/1.2.3.4")
        + struct.pack(">i", 10_000) + struct.pack(">i", 2) + b"su" + struct.pack(">i", 1) + b"a"
    )  # fmt: skip
    v0 = (
        struct.pack(">h", 0) + kafka_string("consumer") + struct.pack(">i", 4)
        + kafka_string("range") + kafka_string("m1") + struct.pack(">i", 1) + member_v0
    )  # fmt: skip
    got = decode_group_value(v0)
    assert got == GroupMetadataValue(
        "consumer", 4, "range", "m1", -1,
        (MemberMetadata("m1", None, "client", "/1.2.3.4", 10_000, 10_000, b"su", b"a"),),
    )  # fmt: skip


def test_legacy_type_0_key_reads_as_offset_commit() -> None:
    key = struct.pack(">h", 0) + kafka_string("g") + kafka_string("t") + struct.pack(">i", 1)
    assert decode_key(key) == OffsetCommitKey("g", "t", 1)


def test_unknown_type_is_skipped_unknown_version_fails() -> None:
    assert decode_record(struct.pack(">h", 9) + b"whatever", b"x") is None
    key = encode_key(OffsetCommitKey("g", "t", 1))
    with pytest.raises(RecordDecodeError):
        decode_record(key, struct.pack(">hq", 9, 1))
    with pytest.raises(RecordDecodeError):
        decode_record(encode_key(GroupMetadataKey("g")), struct.pack(">h", 5))


def test_truncated_and_trailing_bytes_fail() -> None:
    key, value = encode_record(
        Record(OffsetCommitKey("g", "t", 1), OffsetCommitValue(1, 2, "", 3, None))
    )
    assert value is not None
    for cut in range(len(value)):
        with pytest.raises(RecordDecodeError):
            decode_record(key, value[:cut])
    with pytest.raises(RecordDecodeError):
        decode_record(key, value + b"\x00")
    with pytest.raises(RecordDecodeError):
        decode_record(key[:-1], value)


@given(st.binary(max_size=60), st.none() | st.binary(max_size=80))
def test_arbitrary_bytes_never_crash(key: bytes, value: bytes | None) -> None:
    with contextlib.suppress(RecordDecodeError):
        decode_record(key, value)

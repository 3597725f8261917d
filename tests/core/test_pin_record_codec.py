"""The record codec pinned where mutation testing found it loose (issue 28, `make mutation`).

Every GroupMetadataValue version Kafka wrote (v0-v3), built here byte by byte from Kafka's
layouts (docs/protocol.md §12.1: v1 adds each member's rebalance timeout, v2 the state timestamp,
v3 the instance id); the bad values the decoder must refuse, with what it says about them (the
start-up log reports it); round trips of every topic value the encoder takes; and the offset
fast path, rebuilt here so that it is checked against the general decoder (the module builds
its copy once, at import).
"""

from __future__ import annotations

import struct

import pytest

from coordinator.core import record_batch, record_codec
from coordinator.core.record_codec import (
    RecordDecodeError,
    _Reader,
    decode_group_value,
    decode_key,
    decode_offset_value,
    decode_topic_value,
    encode_key,
    encode_value,
)
from coordinator.core.records import (
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    TopicValue,
)


def s(text: str | None) -> bytes:
    """Kafka's (nullable) string: int16 length + UTF-8, -1 = null."""
    if text is None:
        return struct.pack(">h", -1)
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def b(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def group_value(
    version: int,
    *,
    protocol_type: str | None = "consumer",
    count: int | None = None,
    member_id: str | None = "m-1",
    client_id: str | None = "c-1",
    client_host: str | None = "/10.0.0.1",
    subscription: bytes | None = b"sub",
    tail: bytes = b"",
) -> bytes:
    """A GroupMetadataValue at `version` with one member (generation 7, protocol range, leader
    m-1, state timestamp 1234 from v2, instance i-1 from v3, rebalance 45000 from v1, session
    10000), in Kafka's layout."""
    out = struct.pack(">h", version) + s(protocol_type) + struct.pack(">i", 7)
    out += s("range") + s("m-1")
    if version >= 2:
        out += struct.pack(">q", 1234)
    out += struct.pack(">i", 1 if count is None else count)
    out += s(member_id)
    if version >= 3:
        out += s("i-1")
    out += s(client_id) + s(client_host)
    if version >= 1:
        out += struct.pack(">ii", 45_000, 10_000)
    else:
        out += struct.pack(">i", 10_000)
    out += (struct.pack(">i", -1) if subscription is None else b(subscription)) + b(b"asg")
    return out + tail


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_every_kafka_group_value_version_reads(version: int) -> None:
    v = decode_group_value(group_value(version))
    assert v == GroupMetadataValue(
        protocol_type="consumer",
        generation_id=7,
        protocol_name="range",
        leader="m-1",
        current_state_timestamp_ms=1234 if version >= 2 else -1,
        members=(
            MemberMetadata(
                "m-1",
                "i-1" if version >= 3 else None,
                "c-1",
                "/10.0.0.1",
                45_000 if version >= 1 else 10_000,  # v0: the session timeout (§12.3)
                10_000,
                b"sub",
                b"asg",
            ),
        ),
        metadata_hash=0,
    )


@pytest.mark.parametrize("version", [4, 99, 101, -1])
def test_an_unknown_group_value_version_is_refused_by_number(version: int) -> None:
    with pytest.raises(RecordDecodeError, match=rf"^unknown GroupMetadataValue version {version}$"):
        decode_group_value(struct.pack(">h", version) + group_value(3)[2:])


@pytest.mark.parametrize("null", ["member_id", "client_id", "client_host"])
def test_a_null_member_string_is_refused(null: str) -> None:
    with pytest.raises(RecordDecodeError, match=r"^null where a string is required$"):
        decode_group_value(group_value(3, **{null: None}))  # type: ignore[arg-type]


def test_a_null_protocol_type_is_refused() -> None:
    with pytest.raises(
        RecordDecodeError, match=r"^bad group value: protocol type None, 1 members$"
    ):
        decode_group_value(group_value(3, protocol_type=None))


def test_a_negative_member_count_is_refused() -> None:
    # one member's bytes follow, but the count says -1: refused, not read as no members
    value = group_value(3, count=-1)
    with pytest.raises(RecordDecodeError, match=r"^bad group value: protocol type consumer, -1"):
        decode_group_value(value)


def test_a_negative_bytes_length_is_a_truncated_record() -> None:
    with pytest.raises(RecordDecodeError, match=r"^truncated record$"):
        decode_group_value(group_value(3, subscription=None))


def test_a_string_running_past_the_end_is_a_truncated_record() -> None:
    value = group_value(3)
    at = value.index(s("c-1"))
    cut = value[:at] + struct.pack(">h", 200) + b"c-1"  # says 200 bytes, 3 are left
    with pytest.raises(RecordDecodeError, match=r"^truncated record$"):
        decode_group_value(cut)


def test_trailing_bytes_are_refused_and_counted() -> None:
    with pytest.raises(RecordDecodeError, match=r"^3 trailing bytes$"):
        decode_group_value(group_value(3, tail=b"xyz"))


def test_a_fixed_field_past_the_end_is_reported_as_a_bad_group_value() -> None:
    value = group_value(3)
    with pytest.raises(RecordDecodeError, match=r"^bad GroupMetadataValue: "):
        decode_group_value(value[: value.index(s("range")) - 2])  # inside the generation


# -- offset values -----------------------------------------------------------------------------


def test_the_general_offset_decoder_reads_v3_and_refuses_v4() -> None:
    value = encode_value(OffsetCommitValue(42, 7, "m", 1000, None))
    assert decode_offset_value(value) == OffsetCommitValue(42, 7, "m", 1000, None)
    with pytest.raises(RecordDecodeError, match=r"^unknown OffsetCommitValue version 4$"):
        decode_offset_value(struct.pack(">h", 4) + value[2:])


def test_reader_bytes() -> None:
    r = _Reader(b(b"abc") + b"rest", 0)
    assert r.bytes_() == b"abc"
    assert r.pos == 7


# -- topic values ------------------------------------------------------------------------------

TOPIC_ID = bytes(range(16))


@pytest.mark.parametrize(
    "value",
    [
        TopicValue(TOPIC_ID, 3, ()),
        TopicValue(TOPIC_ID, 0, ()),
        TopicValue(TOPIC_ID, 2, (("r1", "r2"), ())),
        TopicValue(TOPIC_ID, 1, (("rack-ü",),)),
    ],
)
def test_every_topic_value_the_encoder_takes_reads_back(value: TopicValue) -> None:
    assert decode_topic_value(encode_value(value)) == value


def topic_bytes(
    partitions: int, racks: list[list[str]] | None = None, count: int | None = None
) -> bytes:
    racks = racks or []
    out = struct.pack(">h", 0) + TOPIC_ID
    out += struct.pack(">ii", partitions, len(racks) if count is None else count)
    for rs in racks:
        out += struct.pack(">i", len(rs)) + b"".join(s(r) for r in rs)
    return out


def test_bad_topic_values_are_refused_with_what_is_wrong() -> None:
    with pytest.raises(
        RecordDecodeError, match=r"^bad topic value: -1 partitions, 0 rack entries$"
    ):
        decode_topic_value(topic_bytes(-1))
    with pytest.raises(RecordDecodeError, match=r"^bad topic value: 2 partitions, 1 rack entries$"):
        decode_topic_value(topic_bytes(2, [["r1"]]))
    bad_count = topic_bytes(1, [[]])[:-4] + struct.pack(">i", -1)
    with pytest.raises(RecordDecodeError, match=r"^bad rack count -1$"):
        decode_topic_value(bad_count)
    with pytest.raises(RecordDecodeError, match=r"^unknown TopicValue version 1$"):
        decode_topic_value(struct.pack(">h", 1) + topic_bytes(1)[2:])


def test_a_topic_id_must_be_16_bytes() -> None:
    with pytest.raises(ValueError, match=r"^a topic id is 16 bytes$"):
        encode_value(TopicValue(b"short", 1, ()))


# -- the offset fast path ----------------------------------------------------------------------


def general(key: bytes, value: bytes) -> Record:
    k = decode_key(key)
    assert type(k) is OffsetCommitKey
    return Record(k, decode_offset_value(value))


OFFSETS = [
    (OffsetCommitKey("g", "orders", 0), OffsetCommitValue(0, -1, "", 0, None)),
    (OffsetCommitKey("group-1", "t", 2**31 - 1), OffsetCommitValue(2**63 - 1, 7, "m", 1_700, None)),
    (OffsetCommitKey("gé", "tö", 5), OffsetCommitValue(-1, 2**31 - 1, "naïve ✓", -5, None)),
    (OffsetCommitKey("", "", 0), OffsetCommitValue(42, 0, "x" * 300, 2**40, None)),
]


@pytest.mark.parametrize("shapes_unchanged", [True, False])
def test_the_fast_path_builds_what_the_general_decoder_builds(
    shapes_unchanged: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every v3 offset record takes the fast path (it returns a Record, not None) and that
    Record equals, and hashes like, the general decoder's; with record shapes it does not know,
    it builds through the classes' own constructors instead, with the same result."""
    assert record_codec.shapes_unchanged() is True
    assert record_batch._builder_works() is True
    monkeypatch.setattr(record_codec, "shapes_unchanged", lambda: shapes_unchanged)
    record_codec._prefix_cache.clear()
    decode = record_codec._make_fast_decoder()
    for _ in range(2):  # the key prefix uncached, then cached
        for key, value in OFFSETS:
            kb, vb = encode_key(key), encode_value(value)
            fast = decode(kb, vb)
            assert fast is not None
            assert type(fast) is Record
            assert type(fast.key) is OffsetCommitKey and type(fast.value) is OffsetCommitValue
            assert fast == general(kb, vb) == Record(key, value)
            assert hash(fast) == hash(Record(key, value))
            assert hash(fast.key) == hash(key) and hash(fast.value) == hash(value)


def test_the_fast_path_leaves_everything_else_to_the_general_decoder() -> None:
    """None (take the general path, which reports errors) for every record that is not a
    well-formed v3 offset commit."""
    record_codec._prefix_cache.clear()
    decode = record_codec._make_fast_decoder()
    key = encode_key(OffsetCommitKey("g", "orders", 1))
    v3 = encode_value(OffsetCommitValue(9, 1, "meta", 100, None))
    v1 = encode_value(OffsetCommitValue(9, -1, "meta", 100, 200))
    bad_utf8 = v3[:14] + b"\xff\xfe\xfd\xfc" + v3[18:]
    # v1 with metadata "ab\0\x08": read as v3, its metadata length field says 8 and the value
    # is 24 + 8 bytes long, exactly what a v3 value with 8 bytes of metadata would be
    lookalike = encode_value(OffsetCommitValue(9, -1, "ab\x00\x08", 100, 200))
    assert len(lookalike) == 32
    assert decode(key, v3) is not None
    for k, v in [
        (key, v1),  # another version
        (key, lookalike),  # a v1 value whose bytes, read as v3, have a consistent length
        (key, v3[:-1]),  # shorter than its metadata length says
        (key, v3 + b"\x00"),  # longer
        (key, v3[:17]),  # shorter than the fixed fields
        (key, v3[:10]),  # shorter than the version, offset, epoch and metadata length
        (key, bad_utf8),  # metadata that is not UTF-8
        (key[:9], v3),  # a key too short to hold its strings and partition
        (key[:2] + struct.pack(">h", 50) + key[4:], v3),  # strings that do not fit the key
        (key[:-4] + b"\x00" + key[-4:], v3),  # a byte between the strings and the partition
    ]:
        assert decode(k, v) is None, (k, v)
    # the shortest well-formed ones: empty group and topic, empty metadata
    empty = encode_key(OffsetCommitKey("", "", 3))
    bare = encode_value(OffsetCommitValue(1, 2, "", 3, None))
    assert len(empty) == 10
    assert decode(empty, bare) == Record(
        OffsetCommitKey("", "", 3), OffsetCommitValue(1, 2, "", 3, None)
    )


@pytest.mark.parametrize("name", ["OFFSET_KEY_FIELDS", "OFFSET_VALUE_FIELDS"])
def test_a_changed_record_shape_turns_the_slot_writing_off(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fast paths write the slots they know; any field list that is not the records' own
    (a field added, renamed or moved) must turn them off."""
    assert record_codec.shapes_unchanged() is True
    fields = getattr(record_codec, name)
    monkeypatch.setattr(record_codec, name, (*fields[1:], fields[0]))
    assert record_codec.shapes_unchanged() is False
    assert record_batch._builder_works() is False

"""The share groups' records, pinned where mutation testing found them loose (issue 36,
`make mutation`): the share partition state record's (type 104) signed fields and its damage
messages, the share-group record codec's refusal of a foreign value, and when a share
partition's updates call for a new snapshot.

A damaged record is reported with what is wrong (the loader logs it with the record's place in
the log), so the messages are compared whole.
"""

from __future__ import annotations

import struct
import uuid

import pytest

from coordinator.core.consumer.codec import ConsumerCodecError
from coordinator.core.record_codec import decode_record, encode_record
from coordinator.core.record_wire import RecordDecodeError
from coordinator.core.records import Record
from coordinator.core.share import records as share_records
from coordinator.core.share.partition import SharePartition
from coordinator.core.share.persisted import RecordState, ShareSnapshot, StateBatch
from coordinator.core.share.state_records import (
    SharePartitionStateKey,
    SharePartitionStateValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from coordinator.core.share.values import SharePartitionConfig

TOPIC = uuid.UUID(int=7)
SNAPSHOT = ShareSnapshot(3, 2, 1, 10, 2, (StateBatch(10, 11, RecordState.ARCHIVED, 5),))


def test_the_key_is_type_group_topic_and_a_signed_partition() -> None:
    key = SharePartitionStateKey("g", TOPIC, -1)
    data = encode_key(key)
    assert data == struct.pack(">hh", 104, 1) + b"g" + TOPIC.bytes + struct.pack(">i", -1)
    assert decode_key(data) == key
    longest = SharePartitionStateKey("g" * 0x7FFF, TOPIC, 2**31 - 1)
    assert decode_key(encode_key(longest)) == longest
    with pytest.raises(struct.error):  # no int16 length holds it: refused, never written
        encode_key(SharePartitionStateKey("g" * 0x8000, TOPIC, 0))


def test_a_damaged_state_record_says_what_is_wrong() -> None:
    key = encode_key(SharePartitionStateKey("g", TOPIC, 0))
    value = encode_value(SharePartitionStateValue(SNAPSHOT))
    # A negative group id length, the rest the size a key of an empty group id would have.
    negative = struct.pack(">hh", 104, -1) + bytes(19)
    cases = [
        (lambda: decode_key(negative), r"^bad share partition state key: negative group id "
         r"length$"),
        (lambda: decode_key(key[:-1]), r"^bad share partition state key: "),
        (lambda: decode_key(key + b"x"), r"^share partition state key has trailing bytes$"),
        (lambda: decode_value(value[:-1]), r"^bad share partition state value: share partition "
         r"state value has a bad length$"),
        (lambda: decode_value(struct.pack(">h", 1) + value[2:]), r"^bad share partition state "
         r"value: unknown share partition state version 1$"),
        (lambda: decode_value(value[:5]), r"^bad share partition state value: unpack_from "),
    ]  # fmt: skip
    for decode, message in cases:
        with pytest.raises(RecordDecodeError, match=message):
            decode()
    assert decode_value(value) == SharePartitionStateValue(SNAPSHOT)


def test_a_foreign_value_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"^not a share-group record value: 'x'$"):
        share_records.encode_value("x")  # type: ignore[arg-type]


def test_a_snapshot_is_due_after_the_configured_number_of_updates() -> None:
    # share.coordinator.snapshot.update.records.per.snapshot: Kafka's default 500.
    p = SharePartition(SharePartitionConfig())
    p.take_snapshot()
    for n in range(499):
        p.acquire("m", [(n, n)], 0, max_records=1)
        assert p.acknowledge("m", [(n, n, [1])], 0).update is not None
    assert not p.snapshot_due()
    assert p.snapshot_due(499) and not p.snapshot_due(500)
    p.acquire("m", [(499, 499)], 0, max_records=1)
    p.acknowledge("m", [(499, 499, [1])], 0)
    assert p.snapshot_due()
    p.take_snapshot()
    assert not p.snapshot_due(1)


def test_the_record_codec_routes_type_104() -> None:
    record = Record(SharePartitionStateKey("g", TOPIC, 4), SharePartitionStateValue(SNAPSHOT))
    assert decode_record(*encode_record(record)) == record


def test_the_share_group_codec_refuses_unknown_types_and_versions() -> None:
    key = share_records.encode_key(share_records.ShareGroupMetadataKey("g"))
    with pytest.raises(ConsumerCodecError, match=r"^not a share-group record type: 99$"):
        share_records.decode_key(99, key)
    with pytest.raises(ConsumerCodecError, match=r"^unknown ShareGroupMetadataKey value version "
                       r"1$"):
        share_records.decode_value(share_records.ShareGroupMetadataKey("g"), b"\x00\x01")

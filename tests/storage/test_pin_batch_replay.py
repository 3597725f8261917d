"""The loading fast path pinned on a fixed record sequence (issue 28, `make mutation`).

tests/storage/test_loading.py checks `BatchReplayer` against record-by-record replay over random
sequences, but it takes seconds, so `make mutation` leaves it out. Here one sequence holds every
case the fused path tells apart: OffsetCommit v3 values with no metadata (one unpack), with ASCII
and non-ASCII metadata, older versions (v0 of exactly the bare length, v1), tombstones, group
records, unknown record types (skipped and counted), two groups whose keys share their first four
bytes, and batches that split it anywhere. A damaged v3 value of the bare length fails loading.
"""

from __future__ import annotations

import struct

import pytest

from coordinator.core.record_batch import BatchReplayer
from coordinator.core.record_codec import (
    RecordDecodeError,
    encode_key,
    encode_record,
)
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
)
from tests.storage.test_loading import UNKNOWN, full_state, new_core, one_by_one


def v0(offset: int, metadata: str, commit_ms: int) -> bytes:
    """OffsetCommitValue v0: version, offset, metadata, commit timestamp."""
    meta = metadata.encode()
    return struct.pack(">hqh", 0, offset, len(meta)) + meta + struct.pack(">q", commit_ms)


def sequence() -> list[tuple[bytes, bytes | None]]:
    def offset(g: str, p: int, v: OffsetCommitValue | None) -> tuple[bytes, bytes | None]:
        return encode_record(Record(OffsetCommitKey(g, "orders", p), v))

    member = MemberMetadata("m1", None, "c", "/h", 30_000, 10_000, b"s", b"a")
    return [
        offset("g1", 0, OffsetCommitValue(1, 0, "", 100, None)),  # caches g1/orders' table
        offset("g1", 1, OffsetCommitValue(2, 3, "", 101, None)),  # bare: one unpack
        offset("g2", 0, OffsetCommitValue(50, 1, "", 102, None)),  # same first 4 key bytes as g1
        offset("g1", 2, OffsetCommitValue(3, 4, "meta", 103, None)),
        offset("g2", 1, OffsetCommitValue(51, 2, "naïve ✓", 104, None)),
        (encode_key(OffsetCommitKey("g1", "orders", 3)), v0(4, "abcd", 105)),  # bare length
        offset("g1", 4, OffsetCommitValue(5, -1, "old", 106, 999)),  # v1
        UNKNOWN,
        offset("g1", 1, None),  # tombstone
        offset("g1", 1, OffsetCommitValue(6, 5, "", 107, None)),
        encode_record(
            Record(
                GroupMetadataKey("g3"),
                GroupMetadataValue("consumer", 1, "range", "m1", 5, (member,)),
            )
        ),
        UNKNOWN,
        offset("g3", 0, OffsetCommitValue(7, 6, "", 108, None)),
        offset("g2", 0, OffsetCommitValue(52, 7, "x", 109, None)),
    ]


@pytest.mark.parametrize("batch", [1, 3, 100])
def test_batch_replay_builds_what_one_by_one_replay_builds(batch: int) -> None:
    kvs = sequence()
    assert len(kvs[5][1] or b"") == 24  # the v0 value is exactly as long as a bare v3 value
    core = new_core()
    replayer = BatchReplayer(core)
    for start in range(0, len(kvs), batch):
        chunk = kvs[start : start + batch]
        replayer.replay_batch([k for k, _ in chunk], [v for _, v in chunk])
    assert full_state(core) == full_state(one_by_one(kvs))
    assert (replayer.applied, replayer.skipped) == (len(kvs) - 2, 2)
    assert core.committed_offsets("g1")[("orders", 1)] == OffsetCommitValue(6, 5, "", 107, None)
    assert core.committed_offsets("g2") == {
        ("orders", 0): OffsetCommitValue(52, 7, "x", 109, None),
        ("orders", 1): OffsetCommitValue(51, 2, "naïve ✓", 104, None),
    }
    for gid in core.offset_group_ids():
        for value in core.committed_offsets(gid).values():
            assert type(value) is OffsetCommitValue
            assert hash(value) == hash(
                OffsetCommitValue(
                    value.offset, value.leader_epoch, value.metadata,
                    value.commit_timestamp_ms, value.expire_timestamp_ms,
                )
            )  # fmt: skip


@pytest.mark.parametrize("meta_len", [1, 3])
def test_a_damaged_v3_value_of_the_bare_length_fails_loading(meta_len: int) -> None:
    """24 bytes with a v3 header that claims metadata: the fast path must not take it as an
    empty-metadata commit; the general path reports it."""
    key = encode_key(OffsetCommitKey("g1", "orders", 0))
    good = encode_record(
        Record(OffsetCommitKey("g1", "orders", 0), OffsetCommitValue(1, 0, "", 5, None))
    )
    damaged = struct.pack(">hqih", 3, 9, 0, meta_len) + struct.pack(">q", 6)
    assert len(damaged) == 24
    replayer = BatchReplayer(new_core())
    replayer.replay_batch([good[0]], [good[1]])  # g1/orders' table is cached
    with pytest.raises(RecordDecodeError):
        replayer.replay_batch([key], [damaged])


class CountingCore:
    """A ReplayTarget that counts how often it is asked for a partition table."""

    def __init__(self) -> None:
        self.core = new_core()
        self.tables_asked = 0

    def replay(self, record: Record) -> None:
        self.core.replay(record)

    def loading_partitions(self, group_id: str, topic: str) -> dict[int, OffsetCommitValue]:
        self.tables_asked += 1
        return self.core.loading_partitions(group_id, topic)


def test_the_fused_path_asks_for_each_partition_table_once() -> None:
    """The point of BatchReplayer: an OffsetCommit v3 value of a (group, topic) it has seen goes
    straight into that table, with or without metadata; only the first one of each (group,
    topic), and the first after a record that may drop tables, takes the general path."""
    target = CountingCore()
    replayer = BatchReplayer(target)
    kvs = [
        encode_record(Record(OffsetCommitKey(g, "orders", p), OffsetCommitValue(p, 1, m, 5, None)))
        for g in ("g1", "g2")
        for p, m in ((0, ""), (1, ""), (2, "meta"), (3, "ü"), (0, ""))
    ]
    replayer.replay_batch([k for k, _ in kvs[:3]], [v for _, v in kvs[:3]])
    replayer.replay_batch([k for k, _ in kvs[3:]], [v for _, v in kvs[3:]])  # g1's table kept
    assert target.tables_asked == 2
    assert full_state(target.core) == full_state(one_by_one(kvs))


def test_keys_and_values_of_different_lengths_are_refused() -> None:
    kvs = sequence()
    with pytest.raises(ValueError):
        BatchReplayer(new_core()).replay_batch([k for k, _ in kvs], [v for _, v in kvs][:-1])

"""The loading fast path (issue 3, restart recovery speed) is the slow path, only faster:

- `EntryReader.kv_batches` gives exactly the entries, damage and bookkeeping of iteration, for any
  bytes and any batch size;
- `BatchReplayer` (fused OffsetCommit path + table cache) builds exactly the state that
  `decode_record` + `GroupCoordinator.replay` builds, record by record, for any record sequence:
  tombstones, group deletions and re-creations, older value versions, unknown types;
- a record the fast path cannot take (bad UTF-8, truncated, unknown version) still fails loading;
- `DiskJournal.load` over a real DiskLog gives the same state, and restores the GC setting.
"""

from __future__ import annotations

import asyncio
import gc
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.record_batch import BatchReplayer
from coordinator.core.record_codec import (
    RecordDecodeError,
    decode_record,
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
from coordinator.serve.journal import DiskJournal
from storage.disk import DiskLog
from storage.entry import Entry, EntryReader, encode_entry
from tests.support.fakeclock import EPOCH, catalog

# ---- framing ----------------------------------------------------------------------------------

entries = st.lists(
    st.tuples(st.binary(max_size=12), st.none() | st.binary(max_size=20)), max_size=12
)


def _encode(kvs: list[tuple[bytes, bytes | None]]) -> bytes:
    return b"".join(encode_entry(i, 1000 + i, k, v) for i, (k, v) in enumerate(kvs))


def _bookkeeping(reader: EntryReader) -> tuple[Any, ...]:
    return (
        reader.damages,
        reader.valid_end,
        reader.tail_bytes,
        reader.entries_read,
        reader.last_offset,
    )


@given(
    entries,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), max_size=4),
    st.integers(0, 40),
    st.sampled_from([1, 2, 3, 1000]),
)
def test_kv_batches_equal_iteration(
    kvs: list[tuple[bytes, bytes | None]],
    flips: list[tuple[int, int]],
    cut: int,
    batch: int,
) -> None:
    data = bytearray(_encode(kvs))
    for pos, bit in flips:
        if data:
            data[pos % len(data)] ^= 1 << bit
    blob = bytes(data[: max(0, len(data) - cut)])
    by_entry = EntryReader(blob)
    want = [(e.key, e.value) for e in by_entry]
    by_batch = EntryReader(blob)
    got: list[tuple[bytes, bytes | None]] = []
    for keys, values in by_batch.kv_batches(batch):
        assert 0 < len(keys) == len(values) <= batch
        got += zip(keys, values, strict=True)
    assert got == want
    assert _bookkeeping(by_batch) == _bookkeeping(by_entry)


def test_kv_batches_split_at_the_batch_size() -> None:
    kvs = [(f"k{i}".encode(), f"v{i}".encode()) for i in range(7)]
    reader = EntryReader(_encode(kvs))
    sizes = [len(keys) for keys, _ in reader.kv_batches(3)]
    assert sizes == [3, 3, 1]
    assert reader.last_offset == 6 and reader.entries_read == 7 and reader.tail_bytes == 0


# ---- decoding and replaying -------------------------------------------------------------------

GROUP_IDS = ("g1", "g2", "g3")
TOPICS = ("orders", "payments")

member = st.builds(
    MemberMetadata, st.sampled_from(["m1", "m2"]), st.none() | st.just("i1"), st.just("c"),
    st.just("/h"), st.just(30_000), st.just(10_000), st.binary(max_size=8), st.binary(max_size=8),
)  # fmt: skip
group_value = st.builds(
    GroupMetadataValue, st.sampled_from(["", "consumer"]), st.integers(0, 5),
    st.none() | st.just("range"), st.none() | st.just("m1"), st.integers(-1, 10**12),
    st.lists(member, max_size=2, unique_by=lambda m: m.member_id).map(tuple),
)  # fmt: skip
offset_value = st.one_of(
    st.builds(
        OffsetCommitValue, st.integers(-1, 10**6), st.integers(-1, 9),
        st.sampled_from(["", "meta", "ü"]), st.integers(0, 10**13), st.none(),
    ),
    st.builds(
        OffsetCommitValue, st.integers(0, 10**6), st.just(-1), st.just(""),
        st.integers(0, 10**13), st.integers(0, 10**13),
    ),
)  # fmt: skip
offset_key = st.builds(
    OffsetCommitKey, st.sampled_from(GROUP_IDS), st.sampled_from(TOPICS), st.integers(0, 2)
)
log_record = st.one_of(
    st.builds(Record, offset_key, offset_value),
    st.builds(Record, offset_key, offset_value),  # offsets are most of any log
    st.builds(Record, offset_key, st.none()),
    st.builds(Record, st.builds(GroupMetadataKey, st.sampled_from(GROUP_IDS)), group_value),
    st.builds(Record, st.builds(GroupMetadataKey, st.sampled_from(GROUP_IDS)), st.none()),
)
UNKNOWN = (struct.pack(">h", 9) + b"future", b"x")


def new_core() -> GroupCoordinator:
    return GroupCoordinator(CoordinatorConfig(), catalog(), lambda p: f"{p}-id", EPOCH)


def full_state(core: GroupCoordinator) -> Any:
    groups = sorted(core.groups(), key=lambda g: g.group_id)
    offsets = {gid: core.committed_offsets(gid) for gid in sorted(core.offset_group_ids())}
    return core.loading, groups, offsets


def one_by_one(kvs: list[tuple[bytes, bytes | None]]) -> GroupCoordinator:
    core = new_core()
    for key, value in kvs:
        record = decode_record(key, value)
        if record is not None:
            core.replay(record)
    return core


@settings(max_examples=300)
@given(
    st.lists(st.one_of(log_record, st.just(None)), max_size=40),
    st.sampled_from([1, 4, 1000]),
)
def test_batch_replayer_builds_the_state_replay_builds(
    records: list[Record | None], batch: int
) -> None:
    kvs = [UNKNOWN if r is None else encode_record(r) for r in records]
    core = new_core()
    replayer = BatchReplayer(core)
    for start in range(0, len(kvs), batch):
        chunk = kvs[start : start + batch]
        replayer.replay_batch([k for k, _ in chunk], [v for _, v in chunk])
    assert full_state(core) == full_state(one_by_one(kvs))
    assert replayer.skipped == records.count(None)
    assert replayer.applied == len(records) - replayer.skipped
    for gid in core.offset_group_ids():  # the fast path builds the same frozen values
        for value in core.committed_offsets(gid).values():
            assert type(value) is OffsetCommitValue
            assert hash(value) == hash(OffsetCommitValue(*(getattr(value, f) for f in (
                "offset", "leader_epoch", "metadata", "commit_timestamp_ms",
                "expire_timestamp_ms"))))  # fmt: skip


def test_deleted_group_is_recreated_by_a_later_offset() -> None:
    """A group tombstone between two offsets of the same (group, topic): the cached table must
    not hide that the next offset re-creates the (simple) group."""
    seq = [
        Record(OffsetCommitKey("g", "t", 0), OffsetCommitValue(1, -1, "", 5, None)),
        Record(OffsetCommitKey("g", "t", 0), None),
        Record(GroupMetadataKey("g"), None),
        Record(OffsetCommitKey("g", "t", 0), OffsetCommitValue(2, -1, "", 6, None)),
    ]
    kvs = [encode_record(r) for r in seq]
    core = new_core()
    BatchReplayer(core).replay_batch([k for k, _ in kvs], [v for _, v in kvs])
    assert core.group("g") is not None
    assert core.committed_offsets("g")[("t", 0)].offset == 2
    assert full_state(core) == full_state(one_by_one(kvs))


@pytest.mark.parametrize(
    "bad",
    [
        struct.pack(">hqih", 3, 1, 2, 2) + b"\xff\xfe" + struct.pack(">q", 3),  # not UTF-8
        struct.pack(">hqih", 3, 1, 2, 0) + struct.pack(">q", 3)[:-1],  # truncated
        struct.pack(">hqih", 3, 1, 2, 0) + struct.pack(">q", 3) + b"\x00",  # trailing byte
        struct.pack(">hqih", 7, 1, 2, 0) + struct.pack(">q", 3),  # unknown version
    ],
)
def test_a_bad_offset_value_fails_loading_on_the_fast_path_too(bad: bytes) -> None:
    key = encode_key(OffsetCommitKey("g", "t", 0))
    good = encode_record(
        Record(OffsetCommitKey("g", "t", 1), OffsetCommitValue(1, 2, "", 3, None))
    )[1]
    assert good is not None
    replayer = BatchReplayer(new_core())
    replayer.replay_batch([key], [good])  # warms the table cache for (g, t)
    with pytest.raises(RecordDecodeError):
        replayer.replay_batch([key], [bad])


# ---- the journal over a real log --------------------------------------------------------------


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.lists(log_record, max_size=60))
def test_journal_load_equals_replay(tmp_path_factory: pytest.TempPathFactory, records: Any) -> None:
    path: Path = tmp_path_factory.mktemp("load")
    kvs = [encode_record(r) for r in records]

    async def run() -> GroupCoordinator:
        log = await DiskLog.open(path, segment_bytes=500)
        if kvs:
            await log.append_durable(kvs)
        await log.close()
        log = await DiskLog.open(path, auto_compact=False)
        core = new_core()
        assert await DiskJournal(log).load(core, batch_entries=7) == len(kvs)
        await log.close()
        return core

    assert gc.isenabled()
    loaded = asyncio.run(run())
    assert gc.isenabled()  # restored after loading
    assert full_state(loaded) == full_state(one_by_one(kvs))


def test_entries_and_kv_batches_agree_on_a_segment_file(tmp_path: Path) -> None:
    kvs = [encode_record(Record(OffsetCommitKey("g", "t", p), OffsetCommitValue(p, 1, "", 2, None)))
           for p in range(100)]  # fmt: skip
    blob = b"".join(encode_entry(i, 0, k, v) for i, (k, v) in enumerate(kvs))
    want: list[Entry] = list(EntryReader(blob))
    got = [
        kv
        for keys, values in EntryReader(blob).kv_batches(30)
        for kv in zip(keys, values, strict=True)
    ]
    assert got == [(e.key, e.value) for e in want]


def test_the_fast_path_is_on() -> None:
    """It turns itself off (everything still loads, slower) if the record shapes change; then
    record_codec's loading path needs updating."""
    from coordinator.core import record_batch

    assert record_batch._FAST_PATH


def test_a_loaded_core_forms_no_reference_cycles() -> None:
    """DiskJournal.load freezes what it loaded (gc.freeze) on the grounds that the state is freed
    by reference counting alone; a cycle in it would leak once frozen."""
    from tests.support.fakeclock import Harness, subscription

    h = Harness()
    _, leader, gen = h.stable_group("g", 3, protocols=(("range", subscription("orders")),))
    h.commit("g", {("orders", 0): 1, ("orders", 1): 2}, generation=gen, member_id=leader)
    h.commit("simple", {("payments", 0): 5})
    kvs = [encode_record(r) for r in h.records]
    core = new_core()
    BatchReplayer(core).replay_batch([k for k, _ in kvs], [v for _, v in kvs])
    core.finish_loading(h.now)
    assert core.group("g") is not None and core.committed_offsets("simple")
    gc.collect()
    del core
    assert gc.collect() == 0

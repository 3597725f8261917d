"""Issue 3, "Torn and damaged files", through the path the server loads by (DiskLog.open ->
DiskJournal.load -> GroupCoordinator): cut the last segment at every byte offset of its final
entries; flip bits in every byte of an entry in the middle; the coordinator loads every time, with
exactly the records whose bytes are intact (for a damaged offset, the partition's previous offset
takes its place, as docs/concepts.md says), and the log goes on taking appends. Then a real
`groupcoord serve` process starts on a directory with both kinds of damage and answers
OffsetFetch.
(tests/test_storage_*.py check the same at the storage layer, entry by entry.)
"""

from __future__ import annotations

import shutil
from pathlib import Path

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.record_codec import encode_record
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
)
from coordinator.serve.journal import DiskJournal
from storage.compaction import list_segments, segment_name
from storage.disk import DiskLog
from storage.entry import encode_entry
from tests.support import durability_util as du
from tests.support.fakeclock import EPOCH, catalog, subscription

TOPIC = "orders"  # 4 partitions in fakeclock's catalog


def records() -> list[Record]:
    """A group snapshot, then three rounds of commits to partitions 0-3 (offset = 10 * round + p),
    then a later snapshot of the group: 14 records, one entry each."""
    member = MemberMetadata("m-1", None, "c", "/h", 30_000, 10_000, subscription(TOPIC), b"a")
    out = [Record(GroupMetadataKey("g"), GroupMetadataValue("consumer", 1, "range", "m-1", EPOCH,
                                                            (member,)))]  # fmt: skip
    for rnd in (1, 2, 3):
        out += [
            Record(OffsetCommitKey("g", TOPIC, p), OffsetCommitValue(10 * rnd + p, -1, "", EPOCH,
                                                                      None))
            for p in range(4)
        ]  # fmt: skip
    out.append(Record(GroupMetadataKey("g"), GroupMetadataValue("consumer", 2, "range", "m-1",
                                                                EPOCH, (member,))))  # fmt: skip
    return out


def expected(kept: list[Record]) -> tuple[dict[tuple[str, int], int], int | None]:
    """(offsets, generation) that replaying `kept` in order gives."""
    offsets: dict[tuple[str, int], int] = {}
    generation = None
    for r in kept:
        if isinstance(r.value, OffsetCommitValue):
            assert isinstance(r.key, OffsetCommitKey)
            offsets[(r.key.topic, r.key.partition)] = r.value.offset
        elif isinstance(r.value, GroupMetadataValue):
            generation = r.value.generation_id
    return offsets, generation


async def write_log(path: Path, recs: list[Record], segment_bytes: int = 16 * 1024 * 1024) -> None:
    log = await DiskLog.open(path, segment_bytes=segment_bytes, auto_compact=False)
    for r in recs:
        await log.append_durable([encode_record(r)])
    await log.close()


async def load(path: Path) -> tuple[GroupCoordinator, DiskLog, int]:
    log = await DiskLog.open(path)
    core = GroupCoordinator(CoordinatorConfig(), catalog(), lambda p: f"{p}-x", EPOCH)
    count = await DiskJournal(log).load(core)
    core.finish_loading(0)
    return core, log, count


def loaded(core: GroupCoordinator) -> tuple[dict[tuple[str, int], int], int | None]:
    snap = core.group("g")
    return (
        {tp: v.offset for tp, v in core.committed_offsets("g").items()},
        None if snap is None or snap.protocol_type == "" else snap.generation_id,
    )


def entry_sizes(recs: list[Record]) -> list[int]:
    return [len(encode_entry(0, 0, *encode_record(r))) for r in recs]


async def test_torn_tail_at_every_byte_of_the_last_entries(tmp_path: Path) -> None:
    recs = records()
    await write_log(tmp_path / "src", recs)
    data = (tmp_path / "src" / segment_name(0)).read_bytes()
    sizes = entry_sizes(recs)
    keep_from = sum(sizes[:-3])
    for cut in range(keep_from, len(data) + 1):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / segment_name(0)).write_bytes(data[:cut])
        whole = len(recs) - 3 + sum(1 for j in range(len(recs) - 3, len(recs))
                                    if sum(sizes[: j + 1]) <= cut)  # fmt: skip
        core, log, count = await load(d)
        assert count == whole, cut
        assert loaded(core) == expected(recs[:whole]), cut
        assert log.load_report.truncated_tail_bytes == cut - sum(sizes[:whole])
        assert log.load_report.damages == []
        # Start-up cut the tail off the file itself, so a second start-up is clean and the same.
        assert (d / segment_name(0)).stat().st_size == sum(sizes[:whole]), cut
        await log.close()
        core, log, count = await load(d)
        assert (count, log.load_report.truncated_tail_bytes, log.load_report.damages) == (
            whole,
            0,
            [],
        ), cut
        assert loaded(core) == expected(recs[:whole]), cut
        # The log goes on after what was kept; a third load sees the new record and no tail.
        extra = Record(OffsetCommitKey("g", TOPIC, 0), OffsetCommitValue(99, -1, "", EPOCH, None))
        journal = DiskJournal(log)
        await journal.wait_durable(journal.append([extra]))
        await log.close()
        core, log, count = await load(d)
        assert count == whole + 1 and log.load_report.truncated_tail_bytes == 0
        assert log.load_report.damages == [], cut
        assert loaded(core)[0][(TOPIC, 0)] == 99
        await log.close()
        shutil.rmtree(d)


async def test_a_flipped_bit_anywhere_in_an_entry_loses_that_entry_only(tmp_path: Path) -> None:
    recs = records()
    await write_log(tmp_path / "src", recs)
    data = (tmp_path / "src" / segment_name(0)).read_bytes()
    sizes = entry_sizes(recs)
    victim = 9  # round 3, partition 0: offset 30; round 2's 20 takes its place
    start = sum(sizes[:victim])
    for pos in range(start, start + sizes[victim]):
        for bit in (0, 6):
            damaged = bytearray(data)
            damaged[pos] ^= 1 << bit
            d = tmp_path / f"flip{pos}-{bit}"
            d.mkdir()
            (d / segment_name(0)).write_bytes(bytes(damaged))
            core, log, count = await load(d)
            assert count == len(recs) - 1, (pos, bit)
            offsets, generation = loaded(core)
            assert offsets[(TOPIC, 0)] == 20, (pos, bit)
            assert (offsets, generation) == expected(recs[:victim] + recs[victim + 1 :])
            assert [(name, dmg.position) for name, dmg in log.load_report.damages] == [
                (segment_name(0), start)
            ], (pos, bit)
            await log.close()
            shutil.rmtree(d)


async def test_damage_in_an_old_segment_and_a_torn_tail_in_the_last(tmp_path: Path) -> None:
    """Several segments: the first group snapshot damaged (first segment), the last one torn
    (last segment); the offsets all load, the group is left a simple group. Then a real server
    process starts on the same files."""
    recs = records()
    await write_log(tmp_path, recs, segment_bytes=400)
    bases = list_segments(tmp_path)
    assert len(bases) >= 3
    first, last = tmp_path / segment_name(bases[0]), tmp_path / segment_name(bases[-1])
    data = bytearray(first.read_bytes())
    data[45] ^= 0x04  # inside entry 0 (the first group snapshot)
    first.write_bytes(bytes(data))
    tail = last.read_bytes()
    last.write_bytes(tail[:-5])  # the last entry (the second group snapshot) is torn
    survivors = recs[1:-1]
    core, log, count = await load(tmp_path)
    assert count == len(survivors)
    assert loaded(core)[0] == expected(survivors)[0]
    assert core.group("g") is not None  # a simple group now: its snapshots are both gone
    assert len(log.load_report.damages) == 1 and log.load_report.truncated_tail_bytes > 0
    await log.close()

    srv = du.ServerProc(tmp_path, du.rc.free_port(), tmp_path, {TOPIC: 4})
    try:
        srv.start()
        await srv.wait_loaded(TOPIC)
        got = await du.fetch_committed(srv.host, srv.port, "g", TOPIC, [0, 1, 2, 3])
        assert got == {p: 30 + p for p in range(4)}, srv.log_tail()
        assert "damaged region" in srv.log_path.read_text(), srv.log_tail()
    finally:
        srv.stop()

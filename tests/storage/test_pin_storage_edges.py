"""Storage edges pinned where mutation testing found them loose (issue 28, `make mutation`).

- The entry header's reserved attributes byte is 0 on disk (storage/entry.py's layout, rebuilt
  here field by field from the docstring).
- The size bound: key + value of exactly MAX_ENTRY_BYTES is written, one byte more is refused
  with the total in the message.
- Compaction keeps a tombstone exactly at the retention horizon, and counts only the
  tombstones it drops; the in-memory log reports one segment in, and compacts only when asked
  or dirty enough.
- Only `<digits>.log` files are segments. Recovery finishes a compaction's swap file even when
  a swap file it did not write sorts before it, and names the files it acted on.
"""

from __future__ import annotations

import asyncio
import struct
import zlib
from pathlib import Path

import pytest

from storage.compaction import (
    CompactionStats,
    compact_entries,
    compact_segments,
    list_segments,
    recover_directory,
    segment_name,
)
from storage.entry import MAX_ENTRY_BYTES, Entry, encode_entry, read_entries
from storage.log import MemoryLog
from tests.storage.test_pin_compaction import DAY_MS, NOW_MS, write_segments


def test_the_header_is_the_documented_layout_with_attributes_zero() -> None:
    key, value = b"key", b"value"
    body_crc = zlib.crc32(key + value)
    head = b"GCe\x01" + struct.pack(">BBIiqqI", 1, 0, 3, 5, 42, 1_700_000_000_000, body_crc)
    expected = head + struct.pack(">I", zlib.crc32(head)) + key + value
    assert encode_entry(42, 1_700_000_000_000, key, value) == expected


def test_an_entry_of_exactly_the_maximum_size_is_written_and_one_more_byte_is_refused() -> None:
    value = bytes(MAX_ENTRY_BYTES - 1)
    data = encode_entry(0, 0, b"k", value)
    entries, damages, valid_end = read_entries(data)
    assert [(e.key, len(e.value or b"")) for e in entries] == [(b"k", MAX_ENTRY_BYTES - 1)]
    assert not damages and valid_end == len(data)
    del data, entries
    with pytest.raises(ValueError, match=rf"^entry of {MAX_ENTRY_BYTES + 1} bytes exceeds "):
        encode_entry(0, 0, b"k", bytes(MAX_ENTRY_BYTES))


def test_a_tombstone_exactly_at_the_horizon_is_kept_and_only_dropped_ones_count() -> None:
    horizon = NOW_MS - DAY_MS
    entries = [
        Entry(0, horizon - 1, b"old", None),  # past retention: dropped
        Entry(1, horizon, b"edge", None),  # exactly at the horizon: kept
        Entry(2, 0, b"value", b"v"),  # a value is kept however old
        Entry(3, 0, b"value2", b"v"),
    ]
    kept, stats = compact_entries(entries, NOW_MS, DAY_MS)
    assert kept == entries[1:]
    assert stats == CompactionStats(1, 4, 3, 1)


def test_the_memory_log_compacts_when_asked_or_dirty_and_reports_one_segment() -> None:
    async def run() -> tuple[CompactionStats | None, CompactionStats | None]:
        log = MemoryLog(clock_ms=NOW_MS, delete_retention_ms=DAY_MS, dirty_ratio=0.5)
        log.append([(b"a", b"1"), (b"a", b"2"), (b"b", b"3")])
        first = await log.compact(force=True)
        log.append([(b"c", b"4")])  # 1 dirty entry of 3: under the ratio
        return first, await log.compact()

    first, second = asyncio.run(run())
    assert first == CompactionStats(1, 3, 2, 0)
    assert second is None


def test_only_numbered_log_files_are_segments(tmp_path: Path) -> None:
    (tmp_path / segment_name(0)).write_bytes(b"")
    (tmp_path / segment_name(7)).write_bytes(b"")
    for stray in ("1234.tmp", "0001-old.log", "notes.log", "00000000000000000003.cleaned"):
        (tmp_path / stray).write_bytes(b"")
    assert list_segments(tmp_path) == [0, 7]


def test_recovery_finishes_a_swap_behind_one_it_did_not_write(tmp_path: Path) -> None:
    write_segments(tmp_path)

    def crash(step: str) -> None:
        if step == "delete_old":
            raise OSError("crashed")

    with pytest.raises(OSError):
        compact_segments(tmp_path, [0, 3, 6], 9, NOW_MS, DAY_MS, fsync=lambda fd: None, step=crash)
    swap = f"{0:020d}.{9:020d}.swap"
    assert (tmp_path / swap).exists()
    (tmp_path / "0.3.6.swap").write_bytes(b"not ours")  # sorts first
    assert recover_directory(tmp_path, fsync=lambda fd: None) == [swap]
    assert list_segments(tmp_path) == [0]
    data = (tmp_path / segment_name(0)).read_bytes()
    assert [e.key for e in read_entries(data)[0]] == [b"d", b"a", b"c"]

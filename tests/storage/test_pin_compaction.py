"""Segment compaction pinned on real files where mutation testing found it loose (issue 28,
`make mutation`): what `compact_segments` reports and writes, the swap protocol's steps in order
(storage/compaction.py: every replaced segment is deleted except B.log, which the swap file
replaces atomically), the new segment's permissions, and recovery leaving alone a `.swap` file
whose name is not one compaction writes.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.compaction import (
    CompactionStats,
    compact_segments,
    list_segments,
    recover_directory,
    segment_name,
)
from storage.entry import Entry, encode_entry, read_entries

DAY_MS = 86_400_000
NOW_MS = 10 * DAY_MS


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def write_segments(directory: Path) -> dict[int, list[Entry]]:
    """Three inactive segments (bases 0, 3, 6; the active one would start at 9): key a written
    three times, b deleted by an old tombstone, c by a recent one, d once."""
    old, recent = NOW_MS - 2 * DAY_MS, NOW_MS - 1_000
    segments = {
        0: [Entry(0, old, b"a", b"a0"), Entry(1, old, b"b", b"b1"), Entry(2, old, b"c", b"c2")],
        3: [Entry(3, old, b"a", b"a3"), Entry(4, old, b"b", None), Entry(5, recent, b"d", b"d5")],
        6: [Entry(6, recent, b"a", b"a6"), Entry(7, recent, b"c", None)],
    }
    for base, entries in segments.items():
        data = b"".join(encode_entry(e.offset, e.timestamp_ms, e.key, e.value) for e in entries)
        (directory / segment_name(base)).write_bytes(data)
    return segments


def test_compaction_reports_and_writes_exactly_the_kept_entries(
    tmp_path: Path, umask_022: None
) -> None:
    segments = write_segments(tmp_path)
    sizes_in = sum((tmp_path / segment_name(b)).stat().st_size for b in segments)
    steps: list[str] = []
    size, stats = compact_segments(
        tmp_path, [0, 3, 6], 9, NOW_MS, DAY_MS, fsync=lambda fd: None, step=steps.append
    )
    # the latest per key in offset order; b's tombstone is past retention, c's is not
    kept = [Entry(5, NOW_MS - 1_000, b"d", b"d5"), Entry(6, NOW_MS - 1_000, b"a", b"a6"),
            Entry(7, NOW_MS - 1_000, b"c", None)]  # fmt: skip
    data = (tmp_path / segment_name(0)).read_bytes()
    assert read_entries(data) == (kept, [], len(data))
    assert size == len(data)
    assert stats == CompactionStats(
        segments_in=3, entries_in=8, entries_out=3, tombstones_dropped=1,
        bytes_in=sizes_in, bytes_out=len(data),
    )  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == [segment_name(0)]
    # rw-r--r--, like any file the log writes under the usual umask
    assert stat.S_IMODE((tmp_path / segment_name(0)).stat().st_mode) == 0o644
    assert steps == [
        "write", "fsync", "rename_swap", "fsync_dir_swap", "delete_old",
        "deleted_one", "deleted_one",  # segments 3 and 6; never B.log (segment 0)
        "rename_final", "fsync_dir_final",
    ]  # fmt: skip


def test_the_first_segment_is_never_missing_during_the_swap(tmp_path: Path) -> None:
    """B.log is replaced by the rename, never deleted first: at every step of the swap there is
    a segment 0 to read (the old one until the rename, the new one after)."""
    write_segments(tmp_path)
    seen: list[tuple[str, bool]] = []

    def step(name: str) -> None:
        seen.append((name, (tmp_path / segment_name(0)).exists()))

    compact_segments(tmp_path, [0, 3, 6], 9, NOW_MS, DAY_MS, fsync=lambda fd: None, step=step)
    assert all(exists for _, exists in seen), seen
    assert list_segments(tmp_path) == [0]


@pytest.mark.parametrize(
    "name",
    [
        "00000000000000000003.swap",  # one number, not B.E
        "junk.00000000000000000009.swap",
        "00000000000000000000.junk.swap",
        "0.3.6.swap",
    ],
)
def test_recovery_leaves_a_swap_file_it_did_not_write_alone(tmp_path: Path, name: str) -> None:
    segments = write_segments(tmp_path)
    (tmp_path / name).write_bytes(b"not ours")
    assert recover_directory(tmp_path, fsync=lambda fd: None) == []
    assert list_segments(tmp_path) == sorted(segments)
    assert (tmp_path / name).read_bytes() == b"not ours"

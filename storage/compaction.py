"""Log compaction: keep the latest entry per key, drop old tombstones, swap files crash-safely.

Like Kafka's log cleaner (docs/protocol.md §12.3), compaction rewrites the *whole* prefix of
inactive segments (never the active one) into one segment, so a dropped tombstone can never
uncover an older value: every older value of that key is in the same rewritten range. Offsets and
timestamps are kept. A tombstone is dropped once its timestamp is older than
`now_ms - delete_retention_ms` (Kafka's log.cleaner.delete.retention.ms, 24 h by default).

The swap protocol; `recover_directory` makes every crash point safe and is idempotent:

  1. write   B.E.cleaned   the new segment (B = first replaced base, E = first base not replaced)
  2. fsync   it
  3. rename  B.E.cleaned -> B.E.swap, fsync the directory  -- the commit point
  4. delete  every replaced segment except B.log
  5. rename  B.E.swap -> B.log (atomic replace), fsync the directory

  Crash before 3: a `.cleaned` file is left; recovery deletes it; the old segments are intact.
  Crash after 3: a `.swap` file exists; recovery deletes the segments in [B, E) and renames it.

This module does file I/O but no asyncio and no clock reads: `now_ms` is passed in and the disk log
runs it on a worker thread. `step` is a hook the tests use to simulate a crash between steps.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from storage.entry import Entry, EntryReader, encode_entry

SEGMENT_SUFFIX = ".log"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

FsyncFn = Callable[[int], None]
StepHook = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class CompactionStats:
    segments_in: int
    entries_in: int
    entries_out: int
    tombstones_dropped: int
    bytes_in: int = 0
    bytes_out: int = 0


def segment_name(base: int) -> str:
    return f"{base:020d}{SEGMENT_SUFFIX}"


def compact_entries(
    entries: Iterable[Entry], now_ms: int, delete_retention_ms: int
) -> tuple[list[Entry], CompactionStats]:
    """The latest entry per key, in offset order, minus tombstones past retention."""
    latest: dict[bytes, Entry] = {}
    count = 0
    for entry in entries:
        count += 1
        latest.pop(entry.key, None)  # re-insert so dict order follows the latest offset
        latest[entry.key] = entry
    horizon = now_ms - delete_retention_ms
    kept = [e for e in latest.values() if e.value is not None or e.timestamp_ms >= horizon]
    dropped = sum(1 for e in latest.values() if e.value is None) - sum(
        1 for e in kept if e.value is None
    )
    return kept, CompactionStats(1, count, len(kept), dropped)


def fsync_dir(directory: Path, fsync: FsyncFn) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def no_step(_: str) -> None:
    return None


def compact_segments(
    directory: Path,
    bases: list[int],
    end: int,
    now_ms: int,
    delete_retention_ms: int,
    *,
    fsync: FsyncFn = os.fsync,
    step: StepHook = no_step,
) -> tuple[int, CompactionStats]:
    """Rewrite segments `bases` (all inactive, ascending, ending before `end`) as one segment.

    Returns (size of the new segment B.log, stats). Damaged regions in the input are skipped, as
    replay skips them; a torn tail cannot occur in an inactive segment (it is fsynced on roll).
    """
    base = bases[0]
    entries: list[Entry] = []
    bytes_in = 0
    for b in bases:
        data = (directory / segment_name(b)).read_bytes()
        bytes_in += len(data)
        entries.extend(EntryReader(data))
    kept, stats = compact_entries(entries, now_ms, delete_retention_ms)
    payload = b"".join(encode_entry(e.offset, e.timestamp_ms, e.key, e.value) for e in kept)

    stem = f"{base:020d}.{end:020d}"
    cleaned = directory / (stem + CLEANED_SUFFIX)
    swap = directory / (stem + SWAP_SUFFIX)
    step("write")
    fd = os.open(cleaned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        step("fsync")
        fsync(fd)
    finally:
        os.close(fd)
    step("rename_swap")
    os.replace(cleaned, swap)
    step("fsync_dir_swap")
    fsync_dir(directory, fsync)
    step("delete_old")
    _finish_swap(directory, swap, base, end, fsync=fsync, step=step)
    return len(payload), CompactionStats(
        len(bases), stats.entries_in, stats.entries_out, stats.tombstones_dropped,
        bytes_in, len(payload),
    )  # fmt: skip


def _finish_swap(
    directory: Path, swap: Path, base: int, end: int, *, fsync: FsyncFn, step: StepHook
) -> None:
    for b in list_segments(directory):
        if base < b < end:
            # A falsy missing_ok is an equivalent mutant: list_segments just listed this file.
            (directory / segment_name(b)).unlink(missing_ok=True)  # pragma: no mutate
            step("deleted_one")
    step("rename_final")
    os.replace(swap, directory / segment_name(base))
    step("fsync_dir_final")
    fsync_dir(directory, fsync)


def list_segments(directory: Path) -> list[int]:
    """Base offsets of the segment files, ascending."""
    bases = []
    for p in directory.iterdir():
        name = p.name
        if name.endswith(SEGMENT_SUFFIX) and name[: -len(SEGMENT_SUFFIX)].isdigit():
            bases.append(int(name[: -len(SEGMENT_SUFFIX)]))
    return sorted(bases)


def _parse_stem(name: str, suffix: str) -> tuple[int, int] | None:
    parts = name[: -len(suffix)].split(".")
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return int(parts[0]), int(parts[1])
    return None


def recover_directory(directory: Path, *, fsync: FsyncFn = os.fsync) -> list[str]:
    """Resolve what an interrupted compaction left behind. Returns the file names acted on."""
    acted: list[str] = []
    for p in sorted(directory.iterdir()):
        if p.name.endswith(CLEANED_SUFFIX):
            p.unlink()
            acted.append(p.name)
    if acted:
        fsync_dir(directory, fsync)
    for p in sorted(directory.iterdir()):
        if p.name.endswith(SWAP_SUFFIX):
            span = _parse_stem(p.name, SWAP_SUFFIX)
            if span is None:
                continue
            acted.append(p.name)
            _finish_swap(directory, p, span[0], span[1], fsync=fsync, step=no_step)
    return acted

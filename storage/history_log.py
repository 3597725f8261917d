"""The history log's files: append-only segments, retained by time and by size.

Layout of `<data-dir>/history/`:

    coordinator.id      this coordinator's identity (a UUID, created once); readers put it in
                        every row, so the histories of many coordinators can be read together
    <base offset>.log   segments of storage/entry.py entries (20-digit base offset, as DiskLog)

Unlike the group log (storage/disk.py) this log is never compacted and nothing waits on it:

- One writer (coordinator/serve/history.py's thread) owns a HistoryLog; it is not thread-safe.
- Offsets are consecutive across segments and across restarts (the last segment is scanned at
  open). A restart starts a new segment instead of appending to a possibly torn one.
- Every segment starts with a SEGMENT_STARTED entry naming the coordinator, so a segment file is
  self-describing even when copied away from its directory.
- No fsync per append: a crash may lose the last writes, and a torn tail is skipped by readers
  (EntryReader). A segment is fsynced when it is closed, so only the newest one can be torn.
- Retention (Kafka's log.retention.ms / log.retention.bytes, applied per log): closed segments are
  deleted oldest first while the log is over `retention_bytes`, or while the oldest one was last
  written (its mtime) more than `retention_ms` ago. The active segment is never deleted; it is
  rolled when it reaches `segment_bytes` or when its first entry is `roll_ms` old, so time
  retention still applies to a log that is written slowly.
"""

from __future__ import annotations

import contextlib
import os
import platform
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from storage.entry import Entry, EntryReader, encode_entry
from storage.history import Kind, encode_fields

SUFFIX = ".log"
ID_FILE = "coordinator.id"
HISTORY_DIR = "history"


def segment_name(base: int) -> str:
    return f"{base:020d}{SUFFIX}"


def list_segment_files(directory: Path) -> list[Path]:
    """The segment files of one history directory, oldest first."""
    found: list[tuple[int, Path]] = []
    with contextlib.suppress(FileNotFoundError):
        for p in directory.iterdir():
            stem = p.name[: -len(SUFFIX)]
            if p.name.endswith(SUFFIX) and stem.isdigit():
                found.append((int(stem), p))
    return [p for _, p in sorted(found)]


def read_coordinator_id(directory: Path) -> str | None:
    try:
        text = (directory / ID_FILE).read_text().strip()
    except OSError:
        return None
    return text or None


def ensure_coordinator_id(directory: Path) -> str:
    """The directory's coordinator id, created (write, fsync, rename) if there is none."""
    existing = read_coordinator_id(directory)
    if existing is not None:
        return existing
    value = str(uuid.uuid4())
    tmp = directory / (ID_FILE + ".tmp")
    with tmp.open("w") as f:
        f.write(value + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, directory / ID_FILE)
    return value


def read_segment(path: Path) -> Iterator[Entry]:
    """Every valid entry of one segment file; damage and a torn tail are skipped."""
    yield from EntryReader(path.read_bytes())


@dataclass(slots=True)
class _Active:
    base: int
    fd: int
    size: int
    first_ms: int


class HistoryLog:
    """`append` entries; `enforce_retention(now_ms)` now and then; `close` at the end."""

    def __init__(
        self,
        directory: Path,
        *,
        retention_ms: int,
        retention_bytes: int,
        segment_bytes: int,
        roll_ms: int | None = None,
        host: str | None = None,
    ) -> None:
        if retention_ms < 1 or retention_bytes < 1 or segment_bytes < 1:
            raise ValueError("history retention and segment sizes must be positive")
        self.directory = Path(directory)
        self.retention_ms = retention_ms
        self.retention_bytes = retention_bytes
        # A segment is at most a quarter of the size budget, so size retention is never coarser
        # than that; 4 KiB at least, so tiny budgets do not mean a file per event.
        self.segment_bytes = max(4096, min(segment_bytes, retention_bytes // 4))
        self.roll_ms = (
            roll_ms if roll_ms is not None else min(3_600_000, max(1_000, retention_ms // 10))
        )
        self.host = host if host is not None else platform.node()
        self.directory.mkdir(parents=True, exist_ok=True)
        self.coordinator_id = ensure_coordinator_id(self.directory)
        self._closed: list[tuple[int, int]] = []  # (base, size) of closed segments, oldest first
        self._active: _Active | None = None
        self._next_offset = 0
        self.deleted_segments = 0
        for path in list_segment_files(self.directory):
            base = int(path.name[: -len(SUFFIX)])
            self._closed.append((base, path.stat().st_size))
        if self._closed:
            last_base = self._closed[-1][0]
            reader = EntryReader((self.directory / segment_name(last_base)).read_bytes())
            for _ in reader:
                pass
            # Never reuse the last file: it may end in a torn tail (or hold no valid entry).
            self._next_offset = max(last_base + 1, reader.last_offset + 1)

    @property
    def next_offset(self) -> int:
        return self._next_offset

    @property
    def size_bytes(self) -> int:
        active = self._active.size if self._active is not None else 0
        return active + sum(size for _, size in self._closed)

    def segment_count(self) -> int:
        return len(self._closed) + (self._active is not None)

    def append(self, entries: Iterable[tuple[int, bytes, bytes]]) -> int:
        """Write (timestamp_ms, key, value) entries; one write(2) per segment touched.
        Returns the number written. Raises OSError (the caller decides what is lost)."""
        chunk: list[bytes] = []
        chunk_bytes = 0
        count = 0
        for ts, key, value in entries:
            active = self._active
            if active is None:
                active = self._open_segment(ts)
            elif chunk_bytes and (
                active.size + chunk_bytes >= self.segment_bytes
                or ts - active.first_ms >= self.roll_ms
            ):
                self._write(active, chunk)
                chunk, chunk_bytes = [], 0
                self._roll()
                active = self._open_segment(ts)
            elif not chunk and (
                active.size >= self.segment_bytes or ts - active.first_ms >= self.roll_ms
            ):
                self._roll()
                active = self._open_segment(ts)
            data = encode_entry(self._next_offset, ts, key, value)
            self._next_offset += 1
            chunk.append(data)
            chunk_bytes += len(data)
            count += 1
        if chunk and self._active is not None:
            self._write(self._active, chunk)
        return count

    def _open_segment(self, ts: int) -> _Active:
        base = self._next_offset
        path = self.directory / segment_name(base)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        active = _Active(base, fd, os.fstat(fd).st_size, ts)
        self._active = active
        header = encode_fields(Kind.SEGMENT_STARTED, (self.coordinator_id, self.host))
        data = encode_entry(self._next_offset, ts, b"", header)
        self._next_offset += 1
        self._write(active, [data])
        return active

    def _write(self, active: _Active, chunk: list[bytes]) -> None:
        data = memoryview(b"".join(chunk))
        while data:
            n = os.write(active.fd, data)
            data = data[n:]
            active.size += n

    def _roll(self) -> None:
        active = self._active
        if active is None:
            return
        self._active = None
        try:
            os.fsync(active.fd)
        finally:
            os.close(active.fd)
        self._closed.append((active.base, active.size))

    def enforce_retention(self, now_ms: int) -> list[str]:
        """Delete closed segments past the size or time limit, oldest first. Returns their names."""
        deleted: list[str] = []
        total = self.size_bytes
        horizon_ns = (now_ms - self.retention_ms) * 1_000_000
        while self._closed:
            base, size = self._closed[0]
            path = self.directory / segment_name(base)
            over_size = total > self.retention_bytes
            if not over_size:
                try:
                    too_old = path.stat().st_mtime_ns < horizon_ns
                except FileNotFoundError:
                    too_old = True  # removed behind our back: just forget it
                if not too_old:
                    break
            path.unlink(missing_ok=True)
            self._closed.pop(0)
            total -= size
            deleted.append(path.name)
        self.deleted_segments += len(deleted)
        return deleted

    def flush(self) -> None:
        """fsync the active segment (on close; appends themselves are not fsynced)."""
        if self._active is not None:
            os.fsync(self._active.fd)

    def close(self) -> None:
        if self._active is not None:
            self._roll()

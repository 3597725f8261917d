"""The log interface the coordinator runtime writes through, and an in-memory implementation.

The log stores opaque key/value entries (coordinator/core/record_codec.py gives them meaning). Its
contract, whatever the backend:

- `append(entries)` assigns consecutive, strictly increasing offsets and returns the last one. It
  never blocks on the disk. It raises LogUnavailableError while the log is failed.
- `wait_durable(offset)` resolves once that offset and every offset before it are durable under the
  log's policy (fsync for `always`). If a write or fsync fails first, it raises LogWriteError; the
  runtime answers the affected requests with NOT_COORDINATOR (16), the code Kafka maps a
  KAFKA_STORAGE_ERROR to (docs/protocol.md §9.1), so clients rediscover the coordinator and retry.
- After a failure, `append` raises until `recover()` succeeds. Nothing that was durable is touched;
  the bytes of the failed batch are cut off (they were never acknowledged).
- `replay()` yields every stored entry in offset order; for each key the last entry wins and a
  tombstone (value None) deletes. Compaction never changes what replay rebuilds, except that
  tombstones older than the retention window disappear along with what they deleted.
- `compact()` runs off the request path; it is a no-op unless the dirty ratio reaches its threshold
  (Kafka's min.cleanable.dirty.ratio, 0.5), or `force` is set.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from storage.compaction import CompactionStats, compact_entries
from storage.entry import Damage, Entry

KeyValue = tuple[bytes, bytes | None]


class LogError(Exception):
    """Base class of storage failures."""


class LogWriteError(LogError):
    """A write or fsync failed: the entries waited on are not durable (map to NOT_COORDINATOR)."""


class LogUnavailableError(LogError):
    """The log is failed and refuses appends until `recover()` succeeds."""


@dataclass(slots=True)
class LoadReport:
    """What start-up found: the runtime logs it; `groupcoord log dump` shows the same damage."""

    segments: int = 0
    entries: int = 0
    damages: list[tuple[str, Damage]] = field(default_factory=list)  # (segment file, region)
    truncated_tail_bytes: int = 0  # torn tail cut off the last segment at open
    recovered_files: list[str] = field(default_factory=list)  # compaction leftovers resolved

    @property
    def damaged_bytes(self) -> int:
        return sum(d.length_bytes for _, d in self.damages)


class Log(Protocol):
    def append(self, entries: Sequence[KeyValue]) -> int: ...

    async def wait_durable(self, offset: int) -> None: ...

    async def append_durable(self, entries: Sequence[KeyValue]) -> int: ...

    def replay(self) -> Iterator[Entry]: ...

    async def compact(self, *, force: bool = False) -> CompactionStats | None: ...

    async def recover(self) -> None: ...

    async def close(self) -> None: ...

    @property
    def healthy(self) -> bool: ...


# Not mutated (`make mutation`): a test double, so its mutants would say nothing about the log the
# coordinator runs on (storage.disk); the tests that use it are what it is for.
class MemoryLog:  # pragma: no mutate block
    """The same contract, in memory, for unit tests. `fail_next` injects a write failure."""

    def __init__(
        self, *, clock_ms: int = 0, delete_retention_ms: int = 86_400_000, dirty_ratio: float = 0.5
    ) -> None:
        self.clock_ms = clock_ms
        self._entries: list[Entry] = []
        self._clean_count = 0
        self._next_offset = 0
        self._durable = -1
        self._failed: LogWriteError | None = None
        self.fail_next: OSError | None = None
        self._retention_ms = delete_retention_ms
        self._dirty_ratio = dirty_ratio

    @property
    def healthy(self) -> bool:
        return self._failed is None

    def append(self, entries: Sequence[KeyValue]) -> int:
        if self._failed is not None:
            raise LogUnavailableError("log failed; recover() first") from self._failed
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            self._failed = LogWriteError(f"write failed: {err}")
            raise self._failed from err
        for key, value in entries:
            self._entries.append(Entry(self._next_offset, self.clock_ms, key, value))
            self._next_offset += 1
        self._durable = self._next_offset - 1
        return self._durable

    async def wait_durable(self, offset: int) -> None:
        if offset > self._durable:
            raise self._failed or LogWriteError(f"offset {offset} was never appended")

    async def append_durable(self, entries: Sequence[KeyValue]) -> int:
        offset = self.append(entries)
        await self.wait_durable(offset)
        return offset

    def replay(self) -> Iterator[Entry]:
        return iter(list(self._entries))

    async def compact(self, *, force: bool = False) -> CompactionStats | None:
        dirty = len(self._entries) - self._clean_count
        if not self._entries or (not force and dirty < self._dirty_ratio * len(self._entries)):
            return None
        kept, stats = compact_entries(self._entries, self.clock_ms, self._retention_ms)
        self._entries = kept
        self._clean_count = len(kept)
        return stats

    async def recover(self) -> None:
        self._failed = None

    async def close(self) -> None:
        return None

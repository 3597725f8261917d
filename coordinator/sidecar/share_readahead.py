"""The read-ahead of share partitions: upstream records fetched before a ShareFetch asks for them.

A share consumer sends one ShareFetch at a time to a broker and waits for its answer (librdkafka's
ShareConsumer, the Java KafkaShareConsumer); each asks for a few hundred records (MaxRecords,
max.poll.records 500). Answering each with its own upstream Fetch put a whole upstream round trip
(5-14 ms in front of tansu) inside every ShareFetch, and a share group read 5-10x slower than a
consumer group, whose client keeps its Fetches in flight (bench/scenario_share.py,
docs/share-delivery.md). Kafka's broker answers a ShareFetch from its own log; the sidecar answers
it from this buffer: per share partition the upstream's record batches from the next fetch offset
on, fetched in chunks of up to `limit` bytes, refilled in the background while the consumer works
through what it was given.

Rules:
- Bounded in bytes: a partition keeps at most `limit` bytes (a single batch larger than that is
  kept whole, as the upstream Fetch returns it: KIP-74), all partitions together at most `total`;
  past that the least recently used partitions' buffers are dropped.
- Only what the upstream answered is kept, in offset order, never a partial batch; a buffer holds
  one isolation level's view (read_committed keeps its `deliverable` flags, computed from the
  Fetch's aborted transactions) and is dropped when the group's isolation level changes.
- `take(key, offset, ...)` answers only an offset inside the buffer (from the batch holding it
  on); below it (records released for redelivery) or past it, the caller fetches upstream, as
  without a buffer, and `keep`s that answer. What lies below `offset` is dropped: those records
  are acquired or finished, and a redelivery below is fetched again.
- The log's records never change under an offset (retention or compaction remove whole records:
  a record kept here that is gone upstream is delivered once more from here; a later upstream
  Fetch sees the new log start and the share partition moves its start offset past it).
This module is pure bookkeeping: the shell (coordinator.sidecar.share_fetch) does the I/O.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final, Generic, TypeVar

from kio.schema.errors import ErrorCode

from coordinator.sidecar.share_upstream import Batch, Fetched

READ_AHEAD_BYTES: Final = 1 << 20  # per share partition (Kafka's default max.partition.fetch.bytes)
READ_AHEAD_TOTAL: Final = 64 << 20  # all partitions of this sidecar together

K = TypeVar("K")


@dataclass(slots=True)
class _Buffer:
    committed: bool
    records: bytes = b""
    batches: list[Batch] = field(default_factory=list)  # positions in `records`
    deliverable: set[int] = field(default_factory=set)  # base offsets of deliverable batches
    log_start_offset: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1

    @property
    def size(self) -> int:
        return self.batches[-1].end - self.batches[0].start if self.batches else 0

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1


class ReadAhead(Generic[K]):
    """The buffers of all share partitions (module docstring), keyed by the caller's key."""

    def __init__(self, limit: int = READ_AHEAD_BYTES, total: int = READ_AHEAD_TOTAL) -> None:
        self.limit = limit
        self.total = total
        self._buffers: OrderedDict[K, _Buffer] = OrderedDict()  # least recently used first
        self._bytes = 0

    @property
    def bytes(self) -> int:
        """What all buffers hold now."""
        return self._bytes

    def buffered(self, key: K) -> tuple[int, int] | None:
        """(first base offset, last offset) of what `key` holds, None when nothing."""
        buf = self._buffers.get(key)
        if buf is None or not buf.batches:
            return None
        return buf.batches[0].base_offset, buf.last_offset

    def take(self, key: K, offset: int, max_bytes: int, committed: bool) -> Fetched | None:
        """What an upstream Fetch of `max_bytes` from `offset` would answer, from the buffer;
        None if the buffer does not hold `offset`. Batches below the one holding `offset` are
        dropped."""
        buf = self._buffers.get(key)
        if buf is None or not buf.batches:
            return None
        if buf.committed != committed:
            self.drop(key)
            return None
        if offset < buf.batches[0].base_offset or offset > buf.last_offset:
            return None
        self._buffers.move_to_end(key)
        batches = buf.batches
        i = 0
        while batches[i].last_offset < offset:
            i += 1
        if i:
            self._trim(buf, i)
            batches = buf.batches
        # Whole batches within max_bytes, at least one (KIP-74), as the upstream answers.
        j, end = 1, batches[0].start + max(max_bytes, 0)
        while j < len(batches) and batches[j].end <= end:
            j += 1
        view = tuple(batches[:j])
        return Fetched(
            ErrorCode.none,
            high_watermark=buf.high_watermark,
            last_stable_offset=buf.last_stable_offset,
            log_start_offset=buf.log_start_offset,
            records=buf.records,
            batches=view,
            deliverable=tuple(b for b in view if b.base_offset in buf.deliverable),
        )

    def wanted(self, key: K, offset: int) -> int:
        """How many bytes a refill of `key` may fetch now, past what it holds from `offset` (0:
        it holds at least half its limit, or all partitions together hold their total)."""
        buf = self._buffers.get(key)
        held = 0
        if buf is not None and buf.batches:
            held = sum(b.end - b.start for b in buf.batches if b.last_offset >= offset)
        if held >= self.limit // 2 or self._bytes - held + self.limit > self.total:
            return 0
        return self.limit - held

    def keep(
        self, key: K, fetched: Fetched, committed: bool, fetched_from: int | None = None
    ) -> None:
        """An upstream Fetch's answer for `key` (asked from `fetched_from`, default its first
        batch's base offset): appended when it was asked from right after what the buffer holds
        (a refill: a gap before its first batch is compaction's), else it replaces the buffer."""
        if fetched.error != ErrorCode.none or not fetched.batches:
            return
        buf = self._buffers.get(key)
        if buf is None or buf.committed != committed or not buf.batches:
            self.drop(key)
            buf = _Buffer(committed)
            self._buffers[key] = buf
        else:
            self._buffers.move_to_end(key)
        first = fetched.batches[0].base_offset if fetched_from is None else fetched_from
        if buf.batches and not buf.batches[0].base_offset <= first <= buf.last_offset + 1:
            self._bytes -= buf.size
            buf.batches, buf.records, buf.deliverable = [], b"", set()
        new = [b for b in fetched.batches if b.last_offset > buf.last_offset]
        if not new:
            return
        if buf.batches and new[0].base_offset <= buf.last_offset:
            return  # overlaps what is held mid-batch: not an answer from where the buffer ends
        keep = [b.base_offset for b in fetched.deliverable if b.last_offset > buf.last_offset]
        self._bytes -= buf.size
        head = buf.batches[0].start if buf.batches else 0
        shift = len(buf.records) - head - new[0].start
        buf.records = buf.records[head:] + fetched.records[new[0].start : new[-1].end]
        buf.batches = [_moved(b, -head) for b in buf.batches] + [_moved(b, shift) for b in new]
        buf.deliverable.update(keep)
        buf.log_start_offset = max(buf.log_start_offset, fetched.log_start_offset)
        buf.high_watermark = fetched.high_watermark
        buf.last_stable_offset = fetched.last_stable_offset
        self._bytes += buf.size
        self._evict(key)

    def drop(self, key: K) -> None:
        buf = self._buffers.pop(key, None)
        if buf is not None:
            self._bytes -= buf.size

    def _trim(self, buf: _Buffer, count: int) -> None:
        gone = buf.batches[:count]
        self._bytes -= gone[-1].end - gone[0].start
        buf.deliverable.difference_update(b.base_offset for b in gone)
        del buf.batches[:count]  # the bytes go at the next append

    def _evict(self, keep: K) -> None:
        while self._bytes > self.total:
            key = next(iter(self._buffers))
            if key == keep:
                break
            self.drop(key)


def _moved(batch: Batch, by: int) -> Batch:
    if by == 0:
        return batch
    return dataclasses.replace(batch, start=batch.start + by, end=batch.end + by)

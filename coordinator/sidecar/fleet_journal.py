"""The runtime's Journal for a fleet: records go to their group's state partition upstream.

`FleetJournal.append(records)` splits the records by state partition and queues them on that
partition's `PartitionWriter`; the append is durable once every partition it touched has been
acknowledged (acks=all) at the offset its writer expected. The persist-then-reply rule is the
local log's: the runtime releases a reply only then.

Invariants:
- One write in flight per partition; records that arrive meanwhile go out together in the next
  batch (group commit, as the local log's fsync batching), so commit throughput is not one round
  trip per commit.
- Sequence numbers are global and increasing; `durable_seq` is the highest seq below which every
  append is decided (written or lost). A partition that fails (fenced, or the upstream refused)
  loses only its own appends: `lost(seq)` tells the runtime which replies to fail, while other
  partitions' appends are released as usual.
- Topic records are not written: every member learns topics from the upstream's metadata.
- ACL and credential records go to the fleet's security topic, whose writer is `SECURITY`
  (coordinator.sidecar.fleet_security), with the same durable-then-reply rule.
- A writer proves its ownership with every acknowledged write and every `verify` that finds the
  partition's end where it expected it; `proven_at` is the monotonic time of the last proof,
  which the fleet's lease reads (coordinator.sidecar.fleet).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Final

from coordinator.core.record_codec import encode_record
from coordinator.core.records import AclKey, Record, ScramCredentialKey, TopicKey
from coordinator.sidecar.fleet_security import SecurityWriter
from coordinator.sidecar.state_topic import (
    CLAIM_PREFIX,
    Claim,
    Fenced,
    StateTopic,
    StateUnavailable,
    fences,
    partition_for,
    writer_of,
)

log = logging.getLogger("groupcoord.fleet.journal")

Entry = tuple[bytes, bytes | None]
SECURITY: Final = -1  # `writers` key of the security records' writer, beside the partitions
_FAILED_KEPT = 100_000  # lost seqs remembered (the runtime asks about recent ones only)


class PartitionClosed(Exception):
    """The partition was handed back (unloaded) before these records were written."""


class PartitionWriter:
    def __init__(
        self,
        topic: StateTopic,
        partition: int,
        claim: Claim,
        next_offset: int,
        latest: dict[bytes, bytes | None],
        on_written: Callable[[list[int]], None],
        on_failed: Callable[[PartitionWriter, list[int], BaseException], None],
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.claim = claim
        self.next_offset = next_offset
        self.latest = latest  # key -> valid value (None: tombstone), for compaction repairs
        self._on_written = on_written
        self._on_failed = on_failed
        self._entries: list[Entry] = []
        self._seqs: list[int] = []
        self._task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.failed: BaseException | None = None
        self.proven_at = time.monotonic()
        self.repaired_keys = 0
        self.batches = 0  # produce requests sent (records / batches = the batching factor)

    def enqueue(self, entries: list[Entry], seq: int) -> None:
        latest = self.latest
        for key, value in entries:
            latest.pop(key, None)
            latest[key] = value
        self._entries.extend(entries)
        self._seqs.append(seq)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def close(self) -> None:
        """No more writes; what is queued and not in flight is lost."""
        if self.failed is None:
            self.failed = PartitionClosed(f"state partition {self.partition} was unloaded")
        self._drop_queue(self.failed)

    def _drop_queue(self, exc: BaseException) -> None:
        seqs, self._seqs, self._entries = self._seqs, [], []
        if seqs:
            self._on_failed(self, seqs, exc)

    async def _run(self) -> None:
        try:
            while self._entries and self.failed is None:
                entries, seqs = self._entries, self._seqs
                self._entries, self._seqs = [], []
                try:
                    async with self._lock:
                        await self._append(entries)
                except (Fenced, StateUnavailable) as exc:
                    self.failed = exc
                    self._on_failed(self, seqs + self._seqs, exc)
                    self._seqs, self._entries = [], []
                    return
                self._on_written(seqs)
            if self.failed is not None:
                self._drop_queue(self.failed)
        finally:
            self._task = None

    async def _append(self, entries: list[Entry]) -> None:
        """Write, then check that each batch landed where this owner expected it."""
        started = time.monotonic()
        landed = await self.topic.send(self.partition, entries, self.claim)
        self.batches += len(landed)
        for base, count in landed:
            if base != self.next_offset:
                await self._examine(self.next_offset, base)
            self.next_offset = base + count
        self.proven_at = started

    async def _examine(self, start: int, end: int) -> None:
        """Someone wrote [start, end) of our partition: a newer claim fences us; a stale owner's
        records are rewritten with their valid values (the compaction hole); our own records
        (a producer retry) change nothing."""
        read, ends = await self.topic.read({self.partition: start}, {self.partition: end})
        end = max(end, ends[self.partition])
        mine = (self.claim.epoch, self.claim.owner)
        dirty: set[bytes] = set()
        for record in read[self.partition]:
            key = record.key
            if key is None:
                continue
            if key.startswith(CLAIM_PREFIX):
                claim = Claim.decode(record.value)
                if fences(claim, self.claim):
                    raise Fenced(
                        f"state partition {self.partition} was claimed by {claim.owner} "
                        f"(epoch {claim.epoch} >= ours, {mine[0]})"
                    )
            elif writer_of(record.headers) != mine:
                dirty.add(key)
        self.next_offset = end
        if dirty:
            log.warning(
                "state partition %d: %d record(s) by a former owner after our claim; "
                "rewriting their keys' valid values",
                self.partition,
                len(dirty),
            )
            self.repaired_keys += len(dirty)
            await self._append([(key, self.latest.get(key)) for key in sorted(dirty)])

    async def verify(self, end: int, asked_at: float) -> None:
        """The periodic proof: `end` is the partition's end offset asked for at `asked_at`.
        Skipped while a write is in flight (that write proves or fences)."""
        if self.failed is not None or self._lock.locked():
            return
        if end <= self.next_offset:  # `<`: see below
            self.proven_at = max(self.proven_at, asked_at)
            return
        try:
            async with self._lock:
                fresh = (await self.topic.end_offsets([self.partition]))[self.partition]
                # Below our own end: tansu 0.6's ListOffsets names the last batch's base offset
                # + 1, which is never a foreign write.
                if fresh > self.next_offset:
                    await self._examine(self.next_offset, fresh)
                self.proven_at = max(self.proven_at, asked_at)
        except (Fenced, StateUnavailable) as exc:
            if self.failed is None:
                self.failed = exc
                self._on_failed(self, [], exc)


class FleetJournal:
    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.writers: dict[int, PartitionWriter | SecurityWriter] = {}
        self._seq = 0
        self._open: dict[int, int] = {}  # seq -> partitions still writing it (insertion order)
        self._failed: dict[int, None] = {}  # lost seqs, oldest first
        self._changed = asyncio.Event()
        self._listener: Callable[[int], None] | None = None

    # -- the runtime's Journal -------------------------------------------------------------------

    def append(self, records: list[Record]) -> int:
        self._seq += 1
        seq = self._seq
        by_partition: dict[int, list[Entry]] = {}
        for record in records:
            key = record.key
            if isinstance(key, TopicKey):
                continue  # module docstring: topics come from the upstream's metadata
            if isinstance(key, AclKey | ScramCredentialKey):
                p = SECURITY  # the fleet's own topic (coordinator.sidecar.fleet_security)
            else:
                p = partition_for(key.group_id, self.partitions)
            by_partition.setdefault(p, []).append(encode_record(record))
        if not by_partition:
            return seq
        writers = self.writers
        missing = [p for p in by_partition if p not in writers or writers[p].failed is not None]
        if missing:
            # A group of a partition this member does not own (it just moved): not durable.
            self._failed[seq] = None
            asyncio.get_running_loop().call_soon(self._advance)
            return seq
        self._open[seq] = len(by_partition)
        for p, entries in by_partition.items():
            writers[p].enqueue(entries, seq)
        return seq

    def durable_seq(self) -> int:
        for seq in self._open:
            return seq - 1
        return self._seq

    def last_seq(self) -> int:
        return self._seq

    async def wait_durable(self, seq: int) -> None:
        while seq in self._open:
            self._changed.clear()
            await self._changed.wait()
        if seq in self._failed:
            raise StateUnavailable("the state partition could not be written")

    def on_durable(self, listener: Callable[[int], None]) -> None:
        self._listener = listener

    def lost(self, seq: int) -> bool:
        return seq in self._failed

    # -- partitions ------------------------------------------------------------------------------

    def new_writer(
        self,
        topic: StateTopic,
        partition: int,
        claim: Claim,
        next_offset: int,
        latest: dict[bytes, bytes | None],
        on_failed: Callable[[PartitionWriter, BaseException], None],
    ) -> PartitionWriter:
        def failed(writer: PartitionWriter, seqs: list[int], exc: BaseException) -> None:
            self._seqs_failed(seqs)
            if not isinstance(exc, PartitionClosed):
                on_failed(writer, exc)

        writer = PartitionWriter(
            topic, partition, claim, next_offset, latest, self._seqs_written, failed
        )
        old = self.writers.get(partition)
        if old is not None:
            old.close()
        self.writers[partition] = writer
        return writer

    def security_writer(self, send: Callable[[list[Entry]], Any]) -> SecurityWriter:
        """The writer of ACL and credential records (coordinator.sidecar.fleet_security)."""
        writer = SecurityWriter(send, self._seqs_written, lambda seqs, _: self._seqs_failed(seqs))
        self.writers[SECURITY] = writer
        return writer

    def close_writer(self, partition: int) -> None:
        writer = self.writers.pop(partition, None)
        if writer is not None:
            writer.close()

    def _seqs_written(self, seqs: list[int]) -> None:
        open_ = self._open
        for seq in seqs:
            left = open_.get(seq)
            if left is None:
                continue
            if left <= 1:
                del open_[seq]
            else:
                open_[seq] = left - 1
        self._advance()

    def _seqs_failed(self, seqs: list[int]) -> None:
        for seq in seqs:
            if self._open.pop(seq, None) is not None:
                self._failed[seq] = None
        while len(self._failed) > _FAILED_KEPT:
            del self._failed[next(iter(self._failed))]
        self._advance()

    def _advance(self) -> None:
        self._changed.set()
        if self._listener is not None:
            self._listener(self.durable_seq())

"""The share partitions of a sidecar: their state (coordinator.core.share.partition), made durable,
their acquisition-lock timers, and their start offsets.

One `SharePartition` per (group id, topic id, partition), created at the first ShareFetch for it:
its start offset comes from the upstream (ListOffsets, per the group's share.auto.offset.reset:
latest by default, as Kafka's) and is persisted before anything is acquired, so a restart never
skips records produced meanwhile.

Durability (STYLE.md: a response leaves only after the records it depends on are durable): every
change to a partition's persisted state is written as the partition's full snapshot, a
coordinator record of the group (coordinator.core.share.state_records: one key per partition,
compaction keeps the latest), through the server's runtime like every record of the group: the
local log with --state local, the group's state partition in a fleet, replayed into the core's
share partitions at start-up or failover; `acknowledge` and `release_member` return once it is
durable. What is persisted is Kafka's (ShareSnapshot): start
offset and the AVAILABLE / ACKNOWLEDGED / ARCHIVED batches with their delivery counts, never an
acquisition lock; so after a crash every record that was acquired but not acknowledged is
delivered again, and no acknowledged record is. Acquisitions are persisted only when they
archived records on the way (aborted transactions, records gone upstream), without waiting.

Timers: one loop timer at the earliest `next_deadline()` of all partitions; when it fires, the
expired locks are released (their records go back to AVAILABLE, or ARCHIVED at the delivery
limit) and persisted. Every release, expiry or acknowledgement wakes the ShareFetches waiting for
records (`changed_event`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode

from coordinator.core.effects import Effects
from coordinator.core.records import Record
from coordinator.core.share import group_configs
from coordinator.core.share.coordinator import ShareGroupCoordinator
from coordinator.core.share.partition import AcquiredRecords, AcquireMode, SharePartition
from coordinator.core.share.persisted import ShareUpdate
from coordinator.core.share.state_records import record_of
from coordinator.serve.runtime import Runtime
from coordinator.sidecar import share_upstream
from coordinator.sidecar.share_upstream import Fetched
from coordinator.sidecar.upstream import Broker, UpstreamUnavailable

log = logging.getLogger("groupcoord.share")

Acquired = AcquiredRecords  # what ShareFetch answers carry
TopicIdPartition = tuple[uuid.UUID, int]
PartitionKey = tuple[str, uuid.UUID, int]  # (group id, topic id, partition): the core's keys


class ShareStore(Protocol):
    """Where share-partition state goes. `write` returns once it is durable and raises if it
    cannot be; without `wait` it only queues it (still in order with every later write)."""

    async def write(self, key: PartitionKey, part: SharePartition, wait: bool) -> None: ...


class RuntimeStore:
    """The state as coordinator records (coordinator.core.share.state_records) through the
    server's runtime: the local log with --state local, the group's state partition in a fleet
    (where a member that does not own the group cannot write it: the write fails)."""

    def __init__(self, runtime: Callable[[], Runtime | None]) -> None:
        self._runtime = runtime

    async def write(self, key: PartitionKey, part: SharePartition, wait: bool) -> None:
        runtime = self._runtime()
        if runtime is None:
            raise RuntimeError("the server is not running")
        record = Record(*record_of(key, part))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def done() -> None:
            if not future.done():
                future.set_result(None)

        def failed(exc: BaseException) -> None:
            if not future.done():
                future.set_exception(exc)

        runtime.apply_then(Effects(records=[record]), done, failed)
        if wait:
            await future
        else:
            future.add_done_callback(_log_failure)


def _log_failure(future: asyncio.Future[None]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.warning("share state write failed: %s", future.exception())


class ShareState:
    """The shell around the core's share partitions (`ShareGroupCoordinator.partitions`, where
    the share-group membership releases a leaving member's records too)."""

    def __init__(
        self,
        store: ShareStore,
        share: Callable[[], ShareGroupCoordinator],
    ) -> None:
        self.store = store
        self._share = share  # the core's, looked up each time: a reload replaces the core
        self._starting: dict[PartitionKey, asyncio.Future[None]] = {}
        self._changed = asyncio.Event()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._writes: set[asyncio.Task[None]] = set()

    @property
    def partitions(self) -> dict[PartitionKey, SharePartition]:
        return self._share().partitions

    def lock_duration_ms(self, group_id: str) -> int:
        return self._share().partition_config(group_id).record_lock_duration_ms

    def read_committed(self, group_id: str) -> bool:
        return self._share().read_committed(group_id)

    def updated(self, updates: list[tuple[PartitionKey, ShareUpdate]]) -> None:
        """The core changed share partitions on its own (a share member left or was fenced, its
        records released: `Effects.share_updates`): persist them and wake waiting fetches."""
        partitions = self.partitions
        for key in dict.fromkeys(k for k, _ in updates):
            part = partitions.get(key)
            if part is not None:
                self._persist(key, part, True)
        self._notify()
        self._rearm()

    def changed_event(self) -> asyncio.Event:
        """Set at the next release, expiry or acknowledgement (a waiting ShareFetch wakes)."""
        return self._changed

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- fetching --------------------------------------------------------------------------------

    async def fetch_offset(
        self, group_id: str, tp: TopicIdPartition, topic: str, broker: Broker
    ) -> int | None:
        """Where to fetch the partition from upstream; None when nothing can be acquired now
        (its in-flight records are at group.share.partition.max.record.locks). Raises
        UpstreamUnavailable when its start offset cannot be read or made durable."""
        key = (group_id, tp[0], tp[1])
        part = self.partitions.get(key)
        if part is None:
            part = await self._start(key, topic, broker)
        return part.next_fetch_offset() if part.can_acquire() else None

    async def _start(self, key: PartitionKey, topic: str, broker: Broker) -> SharePartition:
        starting = self._starting.get(key)
        if starting is not None:  # another member's fetch is starting it: wait for that one
            await asyncio.shield(starting)
            part = self.partitions.get(key)
            if part is None:
                raise UpstreamUnavailable(f"{topic}-{key[2]}: its share partition did not start")
            return part
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._starting[key] = done
        try:
            group_id, _, partition = key
            # The group's share.auto.offset.reset (coordinator.core.share.group_configs).
            policy = self._share().auto_offset_reset(group_id)
            timestamp = group_configs.reset_timestamp(policy, int(time.time() * 1000))
            offset = await share_upstream.start_offset(broker, topic, partition, timestamp)
            if offset == -1 and timestamp >= 0:  # by_duration: nothing that recent
                offset = await share_upstream.start_offset(
                    broker, topic, partition, share_upstream.LATEST
                )
            if offset is None:
                raise UpstreamUnavailable(f"{topic}-{partition}: no {policy} offset upstream")
            config = self._share().partition_config(group_id)
            fresh = SharePartition(config, offset)
            try:
                await self.store.write(key, fresh, True)
            except Exception as exc:  # not durable (a fleet member that lost the group)
                raise UpstreamUnavailable(f"share state not written: {exc}") from exc
            part = self.partitions.setdefault(key, fresh)  # (the core's, if it made one since)
            log.info(
                "share group %s: %s-%d starts at offset %d (%s)",
                group_id, topic, partition, offset, policy,
            )  # fmt: skip
            return part
        finally:
            del self._starting[key]
            done.set_result(None)

    def acquire(
        self,
        group_id: str,
        member_id: str,
        tp: TopicIdPartition,
        fetched: Fetched,
        max_records: int,
        exact: bool,
        now_ms: int,
        batch_size: int | None = None,
    ) -> list[Acquired]:
        key = (group_id, tp[0], tp[1])
        part = self.partitions.get(key)
        if part is None or not fetched.batches:
            return []
        if fetched.log_start_offset > part.start_offset:
            self._persist(
                key, part, part.advance_start_offset(fetched.log_start_offset) is not None
            )
        deliverable = {id(b) for b in fetched.deliverable}
        # Control batches and aborted transactions' batches: archived, never delivered.
        skipped = [
            (b.base_offset, b.last_offset) for b in fetched.batches if id(b) not in deliverable
        ]
        result = part.acquire(
            member_id,
            [(b.base_offset, b.last_offset) for b in fetched.batches],
            now_ms,
            max_records=max_records,
            batch_size=batch_size,
            mode=AcquireMode.RECORD_LIMIT if exact else AcquireMode.BATCH_OPTIMIZED,
            aborted=skipped,
        )
        self._persist(key, part, result.update is not None)
        self._rearm()
        return list(result.records)

    def out_of_range(self, group_id: str, tp: TopicIdPartition, log_start_offset: int) -> None:
        """The upstream no longer has the records at the fetch offset (retention)."""
        key = (group_id, tp[0], tp[1])
        part = self.partitions.get(key)
        if part is not None:
            self._persist(key, part, part.advance_start_offset(log_start_offset) is not None)

    # -- acknowledging, releasing ----------------------------------------------------------------

    async def acknowledge(
        self,
        group_id: str,
        member_id: str,
        tp: TopicIdPartition,
        batches: Sequence[tuple[int, int, Sequence[int]]],
        now_ms: int,
    ) -> ErrorCode:
        """Apply a member's acknowledgements; returns once they are durable (the partition's
        AcknowledgeErrorCode / ErrorCode)."""
        key = (group_id, tp[0], tp[1])
        part = self.partitions.get(key)
        if part is None:
            return ErrorCode.invalid_record_state  # nothing was acquired here
        result = part.acknowledge(member_id, batches, now_ms)
        if result.error != ErrorCode.none:
            return ErrorCode(result.error)
        self._rearm()
        if result.update is not None:
            try:
                await self.store.write(key, part, True)
            except Exception as exc:  # the change is live but not durable: say so
                log.warning("share state write failed: %s", exc)
                return ErrorCode.unknown_server_error
            self._notify()
        return ErrorCode.none

    async def release_member(
        self, group_id: str, member_id: str, partitions: Iterable[TopicIdPartition] | None = None
    ) -> None:
        """A member's share session closed, or it left its group: what it holds goes back."""
        waits = []
        wanted = None if partitions is None else set(partitions)
        for key, part in self.partitions.items():
            if key[0] != group_id:
                continue
            if wanted is not None and (key[1], key[2]) not in wanted:
                continue
            if part.release_member(member_id) is not None:
                waits.append(self.store.write(key, part, True))
        if waits:
            await asyncio.gather(*waits, return_exceptions=True)
            self._notify()
        self._rearm()

    def release_member_soon(self, group_id: str, member_id: str) -> None:
        """For share-group membership (a member fenced or gone): release without waiting."""
        self._spawn(self.release_member(group_id, member_id))

    # -- persistence and timers ------------------------------------------------------------------

    def _persist(self, key: PartitionKey, part: SharePartition, changed: bool) -> None:
        if changed:
            self._spawn(self.store.write(key, part, False))

    def _spawn(self, coro: object) -> None:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)  # type: ignore[arg-type]
        self._writes.add(task)
        task.add_done_callback(self._written)

    def _written(self, task: asyncio.Task[None]) -> None:
        self._writes.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning("share state write failed: %s", task.exception())

    def _rearm(self) -> None:
        deadlines = [d for p in self.partitions.values() if (d := p.next_deadline()) is not None]
        at = min(deadlines) if deadlines else None
        if at == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = at
        if at is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_at(at / 1000, self._expire)

    def _expire(self) -> None:
        self._timer = None
        self._timer_at = None
        now_ms = int(asyncio.get_running_loop().time() * 1000)
        released = False
        for key, part in list(self.partitions.items()):
            deadline = part.next_deadline()
            if deadline is not None and deadline <= now_ms:
                changed = part.expire(now_ms) is not None
                self._persist(key, part, changed)
                released = True
        if released:
            self._notify()
        self._rearm()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

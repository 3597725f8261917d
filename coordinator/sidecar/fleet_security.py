"""A fleet's ACLs and SCRAM credentials (issue 22): one compacted topic every member reads whole.

A group's records live on the state partition its owner writes (coordinator.sidecar.state_topic),
but ACLs and credentials are the whole fleet's: every member authenticates and judges the clients
connected to it (docs/security.md). So they have a topic of their own beside the state topic,
`<state topic>_security` (one partition, cleanup.policy=compact, created like the state topic):
- Writing: CreateAcls, DeleteAcls and AlterUserScramCredentials on any member go through the
  runtime's journal as in standalone mode; `FleetJournal` hands their records to this member's
  `SecurityWriter`, which appends them with acks=all, and the admin API answers once they are
  acknowledged (persist-then-reply). Every member may write: there is no claim and no fencing,
  since a record is a whole fact (this ACL exists; this user's credential is this one).
- Reading: every member tails the topic from its start and applies every record, its own
  included, in the topic's order to its core's SecurityState. Applying a record twice changes
  nothing, and every member applies the same order, so two members changing the same ACL at once
  agree on the outcome (the later record). A member's own change is applied when it is made (as
  in standalone mode) and again when it is read back.
- A change that could not be written was applied here already: the member rebuilds its security
  state from the topic (`reload`), so it never keeps what the fleet does not have.
- Readiness: a member is not ready until it has read the topic up to the end it had at start, so
  no client is judged (or refused a login) by a partial copy.

Invariant: outside a reload, a member's SecurityState is the topic read up to `position`, plus
its own changes that are not acknowledged yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from coordinator.core.loading import SECURITY_KEYS
from coordinator.core.record_codec import decode_record
from coordinator.core.security import SecurityState
from coordinator.sidecar.state_topic import (
    READ_TIMEOUT_S,
    StateUnavailable,
    append,
    ensure_topic,
)

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer

    from coordinator.serve.server import Server

log = logging.getLogger("groupcoord.fleet.security")

Entry = tuple[bytes, bytes | None]
SUFFIX = "_security"
POLL_MS = 200  # how long a tail read waits for new records (the delay before others see one)


def topic_name(state_topic: str) -> str:
    return state_topic + SUFFIX


class SecurityWriter:
    """The FleetJournal's writer for security records (the journal's `enqueue`/`failed`/`close`
    shape of a PartitionWriter): one append in flight, the rest batched behind it."""

    def __init__(
        self,
        send: Callable[[list[Entry]], Any],
        on_written: Callable[[list[int]], None],
        on_failed: Callable[[list[int], BaseException], None],
    ) -> None:
        self._send = send
        self._on_written = on_written
        self._on_failed = on_failed
        self._entries: list[Entry] = []
        self._seqs: list[int] = []
        self._task: asyncio.Task[None] | None = None
        self.failed: BaseException | None = None  # never set: a failed append fails only itself

    def enqueue(self, entries: list[Entry], seq: int) -> None:
        self._entries.extend(entries)
        self._seqs.append(seq)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def close(self) -> None:
        seqs, self._seqs, self._entries = self._seqs, [], []
        if seqs:
            self._on_failed(seqs, StateUnavailable("the fleet stopped"))

    async def _run(self) -> None:
        try:
            while self._entries:
                entries, seqs = self._entries, self._seqs
                self._entries, self._seqs = [], []
                try:
                    await self._send(entries)
                except StateUnavailable as exc:
                    self._on_failed(seqs, exc)
                    continue
                self._on_written(seqs)
        finally:
            self._task = None


class SecurityTopic:
    """The topic, this member's writer to it, and the tail that applies it (module docstring)."""

    def __init__(
        self,
        server: Server,
        name: str,
        replication_factor: int,
        min_insync_replicas: int,
        options: Callable[[], dict[str, Any]],
    ) -> None:
        self.server = server
        self.name = name
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self._options = options
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._tail: asyncio.Task[None] | None = None
        self.position = 0  # the next offset to apply
        self.loaded = False  # read up to the end the topic had at start
        self.applied = 0  # records applied (metrics, tests)
        self._reload = False

    async def start(self, producer: AIOKafkaProducer) -> None:
        """Create the topic if missing, read it to its end into the core, then keep tailing it.
        Raises StateUnavailable (or aiokafka's errors) when the upstream cannot serve it."""
        await ensure_topic(
            self._options(),
            self.name,
            1,
            self.replication_factor,
            self.min_insync_replicas,
            role="security",
        )
        self._producer = producer
        consumer = AIOKafkaConsumer(
            **self._options(),
            enable_auto_commit=False,
            group_id=None,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=POLL_MS,
        )
        await consumer.start()
        self._consumer = consumer
        tp = TopicPartition(self.name, 0)
        consumer.assign([tp])
        await self._load(consumer, tp)
        self._tail = asyncio.get_running_loop().create_task(self._follow(consumer, tp))

    async def stop(self) -> None:
        if self._tail is not None:
            self._tail.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._tail
        if self._consumer is not None:
            with contextlib.suppress(Exception):
                await self._consumer.stop()

    # -- writing ---------------------------------------------------------------------------------

    async def send(self, entries: list[Entry]) -> None:
        """Append with acks=all (the producer is the state topic's). Raises StateUnavailable,
        and then rebuilds this member's security state from the topic (module docstring)."""
        try:
            if self._producer is None:
                raise StateUnavailable("the security topic is not open yet")
            await append(self._producer, self.name, 0, entries, [])
        except StateUnavailable as exc:
            self._reload = True
            log.error("ACL/credential change not written to %s (%s); reloading", self.name, exc)
            raise

    # -- reading ---------------------------------------------------------------------------------

    async def _load(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> None:
        """Read from the start to the end it has now into a fresh SecurityState, then make it
        the core's."""
        state = SecurityState()
        gate = self.server.gate
        if gate is not None:
            gate.configure(state)
        consumer.seek(tp, 0)
        end = (await consumer.end_offsets([tp]))[tp]
        position = applied = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + READ_TIMEOUT_S
        while position < end:  # (tansu 0.6's end is the last batch's base + 1: still below)
            if loop.time() > deadline:
                raise StateUnavailable(f"reading {self.name} to offset {end} timed out")
            batches = await consumer.getmany(tp, timeout_ms=POLL_MS)
            position, count = _apply(self.name, state, batches.get(tp, ()), position)
            applied += count
            position = max(position, await consumer.position(tp))
        self.server.core.state.security = state
        self.position = position
        self.applied = applied
        self.loaded = True
        log.info("%d ACL/credential record(s) read from %s", applied, self.name)

    async def _follow(self, consumer: AIOKafkaConsumer, tp: TopicPartition) -> None:
        while True:
            try:
                if self._reload:
                    self._reload = False
                    await self._load(consumer, tp)
                    continue
                batches = await consumer.getmany(tp, timeout_ms=POLL_MS)
                state = self.server.core.state.security
                self.position, count = _apply(self.name, state, batches.get(tp, ()), self.position)
                self.applied += count
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the upstream away: read it all again once it is back
                log.warning("reading %s: %s; reloading", self.name, exc)
                self._reload = True
                await asyncio.sleep(1.0)


def _apply(topic: str, state: SecurityState, records: Any, position: int) -> tuple[int, int]:
    """Apply `records` in order: (the offset after the last one, how many were applied)."""
    applied = 0
    for record in records:
        position = record.offset + 1
        decoded = None
        if record.key is not None:
            try:
                decoded = decode_record(record.key, record.value)
            except Exception as exc:  # not a record of ours: skipped, said per record
                log.warning("%s offset %d: unreadable record skipped (%s)", topic, record.offset,
                            exc)  # fmt: skip
                continue
        if decoded is None or not isinstance(decoded.key, SECURITY_KEYS):
            continue
        state.apply(decoded)
        applied += 1
    return position, applied

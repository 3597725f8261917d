"""A sidecar fleet's group history, on a topic of the upstream cluster (issue 25).

A fleet's pods keep nothing (their state is on the upstream: coordinator.sidecar.fleet), so their
history goes there too, where `groupcoord audit --bootstrap-server` reads it (pipeline/topic.py).

Layout:
- The topic (`--history-topic`, default `__groupcoord_history`; `--history-topic-partitions`,
  default 10) is created if missing with cleanup.policy=delete and the local history's retention
  (`--history-retention-ms`; `--history-retention-bytes` split over the partitions, since Kafka's
  retention.bytes is per partition; segments small enough for that retention to bite). An
  existing topic is used as it is.
- A record is one history entry (storage/history.py): key = group id, value = the codec's value,
  timestamp = the event's wall clock, header `gc.coordinator` = the writing member's id (the
  fleet's member id, as /fleet shows it).
- Partition = Kafka's default partitioner of the key (murmur2, as the Java producer): one group's
  events stay in one partition, in the order they were written. Adding partitions to the topic
  later moves groups, so their older and newer events end up in different partitions: don't.

The rules of the local history hold (coordinator.serve.history: this is its subclass):
- The request path never waits: `record` is the same O(1) deque append; a full queue drops and
  counts (`dropped`).
- A daemon thread runs an asyncio loop OF ITS OWN with its own producer, so the server's loop
  never runs a line of this (nor waits on the upstream). Each flush sends what is queued, in one
  batch per partition, and waits for the acknowledgements (acks=all), so one flush is in flight at
  a time; while it waits, new events queue up (and past the limit are dropped).
- A failed send loses that flush's rows (`lost`, `write_errors`, one log line a minute), drops the
  producer, and waits RETRY_MIN_S..RETRY_MAX_S before trying a new one; meanwhile events queue, so
  a short outage of the upstream loses nothing that fits in the queue.
- History never affects group state, and ownership does not fence it: after a group's state
  partition moves, the former owner's last flush (at most one flush interval) may land after the
  new owner's first events. Each record names its writer, so the audit can tell.

The producer is idempotent (as Kafka's producers are by default): a batch the client retries is
written once. An upstream that refuses the InitProducerId request (tansu 0.6 answers aiokafka's
with an unknown error; a broker whose ACLs deny IdempotentWrite answers an authorization error)
gets a plain producer instead, once for the recorder's life, said in one log line: there a retried
batch may be written twice, which the audit sees as a repeated event, never as a lost one.
`idempotent` tells which the recorder uses (None until the first producer started).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError
from aiokafka.partitioner import murmur2

from coordinator.security.client import PLAINTEXT, ClientSecurity
from coordinator.serve.history import HistoryRecorder, HistorySettings, Row
from coordinator.sidecar.state_topic import durability, log_topic
from coordinator.sidecar.upstream_clients import client_options
from storage.history import HISTORY_TOPIC, WRITER_HEADER, encode_fields

if TYPE_CHECKING:
    from coordinator.sidecar.fleet import Fleet

log = logging.getLogger("groupcoord.history")

MAX_BATCH_BYTES = 1 << 20  # one produce batch (max.message.bytes' default is 1 MiB)
MIN_SEGMENT_BYTES = 1 << 20  # Kafka's lower bound for segment.bytes
RETRY_MIN_S = 1.0
RETRY_MAX_S = 30.0
POLL_S = 0.05  # how often the writer's loop looks at the queue between flushes
IDLE_POLL_S = 0.5  # the same while nothing is queued


@dataclass(frozen=True, slots=True)
class HistoryTopicOptions:
    bootstrap: str
    coordinator_id: str  # the writer's id, in every record's header
    topic: str = HISTORY_TOPIC
    partitions: int = 10
    replication_factor: int = -1  # -1: 3, or the number of brokers if fewer (as the state topic)
    min_insync_replicas: int = 0  # 0: 2 when replicated 3 times, else the cluster's (ditto)
    security: ClientSecurity = PLAINTEXT


def topic_configs(settings: HistorySettings, partitions: int) -> dict[str, str]:
    """The topic's configs at creation: the local history's retention, per partition."""
    per_partition = max(1, settings.retention_bytes // max(1, partitions))
    # As storage.history_log: a segment at most a quarter of the size budget (Kafka deletes whole
    # segments only), rolled after a tenth of the retention time (at most an hour), so both
    # limits take effect on a topic written slowly.
    segment = max(MIN_SEGMENT_BYTES, min(settings.segment_bytes, per_partition // 4))
    return {
        "cleanup.policy": "delete",
        "retention.ms": str(settings.retention_ms),
        "retention.bytes": str(per_partition),
        "segment.bytes": str(segment),
        "segment.ms": str(min(3_600_000, max(1_000, settings.retention_ms // 10))),
    }


@functools.lru_cache(maxsize=65_536)
def partition_for(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner for a keyed record: toPositive(murmur2(key)) % partitions."""
    return int(murmur2(key) & 0x7FFFFFFF) % partitions


def from_settings(settings: Any, fleet: Fleet) -> TopicHistoryRecorder | None:
    """The fleet's recorder for `serve`'s settings; None with --no-history."""
    if not settings.history:
        return None
    options = HistoryTopicOptions(
        bootstrap=fleet.options.bootstrap,
        coordinator_id=fleet.member_id,
        topic=settings.history_topic,
        partitions=settings.history_topic_partitions,
        replication_factor=fleet.options.replication_factor,
        min_insync_replicas=fleet.options.min_insync_replicas,
        security=fleet.options.security,
    )
    history = HistorySettings(
        retention_ms=settings.history_retention_ms,
        retention_bytes=settings.history_retention_bytes,
        segment_bytes=settings.history_segment_bytes,
    )
    return TopicHistoryRecorder(options, history)


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class TopicHistoryRecorder(HistoryRecorder):
    """`attach` (or `start`), then `record` events, then `close()`: as the local recorder."""

    def __init__(
        self,
        options: HistoryTopicOptions,
        settings: HistorySettings | None = None,
        *,
        clock_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        super().__init__(Path(options.topic), settings, clock_ms=clock_ms)
        self.options = options
        self._writer = options.coordinator_id.encode()
        self._producer: AIOKafkaProducer | None = None
        self._partitions = 0
        self._retry_at = 0.0
        self._retry_s = RETRY_MIN_S
        self.idempotent: bool | None = None  # None: no producer started yet

    @property
    def where(self) -> str:
        return f"topic {self.options.topic} on {self.options.bootstrap}"

    @property
    def readback_dir(self) -> Path | None:
        return None  # nothing local to read back (the status page starts empty)

    @property
    def coordinator_id(self) -> str | None:
        return self.options.coordinator_id

    def open(self) -> None:
        """Nothing to open here: the producer starts on the writer's own loop."""

    def flush(self, *, final: bool = False) -> int:
        """One flush on a loop of its own, for a recorder whose thread was never started."""

        async def once() -> int:
            try:
                return await self._flush(final=final)
            finally:
                await self._stop_producer()

        return asyncio.run(once())

    # -- the writer thread -------------------------------------------------------------------------

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(self._main())
        finally:
            loop.close()

    async def _main(self) -> None:
        interval = self.settings.flush_interval_ms / 1000
        try:
            while True:
                # Polled, not signalled: `record` (on the server's loop) stays a deque append,
                # and `close` or a burst (the base class sets `_wake`) is seen within POLL_S.
                # With nothing queued it looks twice a second, not twenty times: an idle member
                # costs next to nothing (windows close, and `close` is seen, within IDLE_POLL_S).
                waited = 0.0
                while not self._wake.is_set() and waited < (interval if self._queue else 1.0):
                    step = POLL_S if self._queue else IDLE_POLL_S
                    await asyncio.sleep(step)
                    waited += step
                self._wake.clear()
                stopping = self._stopping
                try:
                    await self._flush(final=stopping)
                except Exception:  # a bug here must cost history, never the thread or the server
                    self.write_errors += 1
                    log.exception("history writer failed; continuing")
                if stopping:
                    return
        finally:
            await self._stop_producer()

    async def _flush(self, *, final: bool) -> int:
        if not final and time.monotonic() < self._retry_at:
            return 0  # the upstream failed recently: let events queue until the retry
        rows, now = self.take_rows(final=final)
        written = 0
        if rows:
            written = await self._send(rows)
        self.report_drops(now)
        return written

    async def _send(self, rows: list[Row]) -> int:
        try:
            producer = await self._ready()
            acks = []
            for partition, entries in self._by_partition(rows).items():
                batch = producer.create_batch()
                for ts, key, value in entries:
                    if not self._append(batch, ts, key, value):
                        acks.append(await self._send_batch(producer, batch, partition))
                        batch = producer.create_batch()
                        if not self._append(batch, ts, key, value):
                            raise ValueError("a history record larger than a produce batch")
                acks.append(await self._send_batch(producer, batch, partition))
            await asyncio.gather(*acks)
        except Exception as exc:  # aiokafka's KafkaError, a timeout, a closed connection
            self._failed(exc, len(rows))
            await self._stop_producer()
            self._retry_at = time.monotonic() + self._retry_s
            self._retry_s = min(self._retry_s * 2, RETRY_MAX_S)
            return 0
        self._retry_s = RETRY_MIN_S
        self.written += len(rows)
        return len(rows)

    def _by_partition(self, rows: list[Row]) -> dict[int, list[tuple[int, bytes, bytes]]]:
        """(timestamp, key, value) of each row, by partition, in order."""
        out: dict[int, list[tuple[int, bytes, bytes]]] = {}
        partitions = self._partitions
        for ts, gid, kind, fields in rows:
            key = gid.encode("utf-8", "surrogatepass")
            entry = (ts, key, encode_fields(kind, fields))
            out.setdefault(partition_for(key, partitions), []).append(entry)
        return out

    def _append(self, batch: Any, ts: int, key: bytes, value: bytes) -> bool:
        headers = [(WRITER_HEADER, self._writer)]
        return batch.append(key=key, value=value, timestamp=ts, headers=headers) is not None

    async def _send_batch(self, producer: AIOKafkaProducer, batch: Any, partition: int) -> Any:
        return await producer.send_batch(batch, self.options.topic, partition=partition)

    async def _ready(self) -> AIOKafkaProducer:
        producer = self._producer
        if producer is None:
            await self._ensure_topic()
            producer = await self._start_producer()
            self._producer = producer
        found = await producer.partitions_for(self.options.topic)
        if not found:
            raise RuntimeError(f"topic {self.options.topic} has no partitions")
        if self._partitions and len(found) != self._partitions:
            log.warning(
                "history topic %s now has %d partitions (was %d): groups move partitions",
                self.options.topic,
                len(found),
                self._partitions,
            )
        self._partitions = len(found)
        return producer

    async def _start_producer(self) -> AIOKafkaProducer:
        """An idempotent producer, or a plain one where the upstream refuses InitProducerId.
        A refusal is a non-retriable answer to it; a failure to reach the upstream (retriable,
        or a timeout) is not one and fails this flush as any other send failure."""
        if self.idempotent is not False:
            try:
                producer = await self._new_producer(idempotent=True)
            except KafkaError as exc:
                if exc.retriable or isinstance(exc, KafkaTimeoutError):
                    raise
                log.warning(
                    "history topic %s: the upstream refused an idempotent producer (%s); "
                    "writing without idempotence (a retried batch may be written twice)",
                    self.options.topic,
                    exc,
                )
                self.idempotent = False
            else:
                self.idempotent = True
                return producer
        return await self._new_producer(idempotent=False)

    async def _new_producer(self, *, idempotent: bool) -> AIOKafkaProducer:
        producer = AIOKafkaProducer(
            **client_options(self.options.bootstrap, self.options.security),
            acks="all",
            enable_idempotence=idempotent,  # its InitProducerId is sent by start()
            linger_ms=0,
            max_batch_size=MAX_BATCH_BYTES,
            max_request_size=MAX_BATCH_BYTES + 4096,
        )
        try:
            await producer.start()
        except BaseException:
            await producer.stop()
            raise
        return producer

    async def _ensure_topic(self) -> None:
        options = self.options
        admin = AIOKafkaAdminClient(**client_options(options.bootstrap, options.security))
        await admin.start()
        try:
            replication, min_insync = options.replication_factor, options.min_insync_replicas
            if replication < 1 or min_insync < 1:
                brokers = len((await admin.describe_cluster()).get("brokers") or [None])
                replication, min_insync = durability(replication, min_insync, brokers)
            configs = topic_configs(self.settings, options.partitions)
            if min_insync > 0:
                configs["min.insync.replicas"] = str(min_insync)
            topic = NewTopic(options.topic, options.partitions, replication, topic_configs=configs)
            try:
                response = await admin.create_topics([topic])
            except TopicAlreadyExistsError:
                log_topic("history", options.topic, None)
                return
            codes = [entry[1] for entry in getattr(response, "topic_errors", ())]
            for code in codes:
                if code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
                    raise RuntimeError(f"cannot create {options.topic}: error {code}")
            log_topic("history", options.topic, None if 36 in codes else topic)
        finally:
            await admin.close()

    async def _stop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await producer.stop()
            except Exception as exc:
                log.debug("history producer stop: %s", exc)

"""A fleet's state on the upstream cluster: a compacted topic, one writer per owned partition.

Layout (issue 21; docs in docs/sidecar.md):
- The topic (default `__groupcoord_state`, 50 partitions, cleanup.policy=compact) is created if
  missing. A group lives on partition `partition_for(group_id, n)`: Kafka's
  `Utils.abs(groupId.hashCode()) % n`, as for __consumer_offsets.
- A record is the local log's key and value (core.record_codec) with two headers: `gc.epoch`
  (8 bytes, big-endian) and `gc.owner` (the writing member's id).
- A claim is a record keyed `CLAIM_PREFIX + epoch` whose value is JSON {epoch, owner, address}.
  A key per epoch, so compaction keeps every claim (one per ownership change: few and small).

The replay rule (`Replay`), the fence: a claim takes the partition iff its epoch is higher than
the current claim's; a record counts iff its (epoch, owner) are the current claim's. The epoch is
the fleet group's generation (the upstream's group coordinator is the arbiter), so a member that
lost a partition writes with an older epoch, and nobody who reads the partition sees its writes.
Its own writer learns it was fenced: every write expects to land at the partition's known end
(`PartitionWriter.next_offset`), and a write that lands later makes it read what came in between
(`_examine`); a newer claim there ends its ownership and the write's replies fail.

The compaction hole: a stale owner's late record is the latest value of its key, so compaction
would delete the key's valid value before it. The owner rewrites such keys with their valid value
(`Replay.dirty`): at load, and whenever a write or the periodic `verify` finds foreign records.
Until then min.compaction.lag.ms (set at creation) keeps compaction away from recent records.

Every aiokafka client is made with `client_options` (coordinator.sidecar.upstream_clients): the
one place for upstream connection settings (security goes there). The records themselves are
written by a Produce of our own on the sidecar's upstream links (coordinator.sidecar.state_produce
says why: aiokafka's per-message path was a quarter of a member's CPU under commits); aiokafka
writes the claims (one per ownership change) and reads.
"""

from __future__ import annotations

import functools
import json
import logging
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from coordinator.core.record_codec import decode_record
from coordinator.core.records import Record, TopicKey
from coordinator.serve.addresses import parse_upstream
from coordinator.sidecar.state_produce import StateProducer, StateUnavailableError
from coordinator.sidecar.upstream import Upstreams

log = logging.getLogger("groupcoord.fleet.state")

CLAIM_PREFIX = b"\xff\xffgroupcoord.claim:"  # record_codec keys start with version 0..3
EPOCH_HEADER = "gc.epoch"
OWNER_HEADER = "gc.owner"
_EPOCH = struct.Struct(">q")
READ_TIMEOUT_S = 30.0  # a partition that cannot be read to its end this fast failed to load
MAX_BATCH_BYTES = 1 << 20  # one produce batch (max.message.bytes' default is 1 MiB)


class Fenced(Exception):
    """A newer claim took the partition: this member must stop answering for it."""


class StateUnavailable(Exception):
    """The upstream did not acknowledge or could not be read: the partition must be reloaded."""


def java_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


@functools.lru_cache(maxsize=1 << 16)
def partition_for(group_id: str, partitions: int) -> int:
    """Kafka's partitionFor(groupId): Utils.abs(hashCode) % n, where Utils.abs is & 0x7fffffff.
    Memoized: a fleet member asks it for every group request it routes (coordinator.sidecar.fleet
    `locate`) and every record it journals; hashing the id each time was a tenth of a forwarded
    heartbeat's cost."""
    return (java_hash(group_id) & 0x7FFFFFFF) % partitions


@dataclass(frozen=True, slots=True)
class Claim:
    epoch: int
    owner: str
    address: str

    def key(self) -> bytes:
        return CLAIM_PREFIX + str(self.epoch).encode()

    def value(self) -> bytes:
        return json.dumps(
            {"epoch": self.epoch, "owner": self.owner, "address": self.address}
        ).encode()

    @staticmethod
    def decode(value: bytes) -> Claim:
        data = json.loads(value)
        return Claim(int(data["epoch"]), str(data["owner"]), str(data.get("address", "")))


def takes_partition(claim: Claim, current: Claim | None) -> bool:
    """Replay: whether `claim`, read after `current`, becomes the partition's claim. Only a higher
    epoch does; at an equal epoch the first claim in log order stays. Two members claiming with
    the same epoch (one of them ahead of or behind the fleet's generation) so never both own the
    partition: the second finds at load that its claim did not win, and does not serve."""
    return current is None or claim.epoch > current.epoch


def fences(claim: Claim, mine: Claim) -> bool:
    """Whether `claim`, found after our own in the partition, ends our ownership: a higher epoch,
    or the same epoch by another member. (That member's replay keeps ours, by `takes_partition`,
    so neither writes on: the partition waits for the next generation's claim.)"""
    return claim.epoch > mine.epoch or (claim.epoch == mine.epoch and claim.owner != mine.owner)


def headers(claim: Claim) -> list[tuple[str, bytes]]:
    return [(EPOCH_HEADER, _EPOCH.pack(claim.epoch)), (OWNER_HEADER, claim.owner.encode())]


def writer_of(record_headers: Any) -> tuple[int, str] | None:
    epoch: int | None = None
    owner: str | None = None
    for name, value in record_headers or ():
        if name == EPOCH_HEADER and len(value) == _EPOCH.size:
            epoch = _EPOCH.unpack(value)[0]
        elif name == OWNER_HEADER:
            owner = value.decode(errors="replace")
    return None if epoch is None or owner is None else (epoch, owner)


@dataclass(slots=True)
class Replay:
    """One partition's log, read in order, under the replay rule (module docstring).

    `latest` is the valid value of every key, in the order of its last valid write (the order a
    compacted copy of the log would replay in); `dirty` the keys whose last record is foreign
    (written after the claim that makes it stale); `claim` the partition's current claim."""

    claim: Claim | None = None
    claim_ms: int = 0  # the current claim record's timestamp
    latest: dict[bytes, bytes | None] = field(default_factory=dict)
    dirty: set[bytes] = field(default_factory=set)

    def feed(
        self, key: bytes | None, value: bytes | None, record_headers: Any, timestamp_ms: int = 0
    ) -> None:
        if key is None:
            return
        if key.startswith(CLAIM_PREFIX):
            if value is None:
                return
            try:
                claim = Claim.decode(value)
            except (ValueError, KeyError, TypeError):
                log.warning("ignoring an undecodable claim record")
                return
            if takes_partition(claim, self.claim):
                self.claim = claim
                self.claim_ms = timestamp_ms
            return
        current = self.claim
        if current is not None and writer_of(record_headers) == (current.epoch, current.owner):
            self.latest.pop(key, None)
            self.latest[key] = value
            self.dirty.discard(key)
        else:
            self.dirty.add(key)

    def records(self) -> list[Record]:
        """The valid state as the core's records (tombstones dropped: they delete nothing that
        is not already absent in a replay of `latest` alone)."""
        out: list[Record] = []
        for key, value in self.latest.items():
            if value is None:
                continue
            record = decode_record(key, value)
            if record is not None and not isinstance(record.key, TopicKey):
                out.append(record)
        return out


# Not under mutation testing from here to durability(): the upstream I/O (aiokafka clients),
# held by tests/sidecar/test_fleet_state.py against tansu and Kafka; the rules it applies
# (Replay, takes_partition, fences, writer_of) are above and pinned by test_pin_rules.py.
# pragma: no mutate start
class StateTopic:
    """The topic, its producer and its readers. `start` retries until the upstream answers."""

    def __init__(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        min_insync_replicas: int,
        options: Callable[[], dict[str, Any]],
        upstreams: Upstreams | None = None,
        observe: Callable[[Any], None] | None = None,
    ) -> None:
        """`upstreams`: the sidecar's brokers, whose links the records are written on, and
        `observe` what it learns from a Metadata answer (Sidecar.observe_metadata); without
        them (tests, tools), links of its own to the bootstrap's brokers, plaintext."""
        self.name = name
        self.partitions = partitions
        self.replication_factor = replication_factor
        self.min_insync_replicas = min_insync_replicas
        self._options = options
        self.producer: AIOKafkaProducer | None = None
        self._reader: AIOKafkaConsumer | None = None
        self._own_upstreams = upstreams is None
        if upstreams is None:
            upstreams = Upstreams(parse_upstream(str(options()["bootstrap_servers"])))
        self._observe = observe
        self.records = StateProducer(upstreams, name, observe)

    async def start(self) -> None:
        if self.records.closed:  # started again after a failed start (Fleet._run retries)
            self.records = StateProducer(self.records.upstreams, self.name, self._observe)
        await self._ensure_topic()
        producer = AIOKafkaProducer(
            **self._options(),
            acks="all",
            # Not idempotent: tansu 0.6 refuses aiokafka's InitProducerId. Kafka would take it,
            # but nothing depends on it: a batch retried and written twice lands after the
            # offset its writer expected and is examined like any late write (offsets fence).
            enable_idempotence=False,
            linger_ms=0,
            max_batch_size=MAX_BATCH_BYTES,
            max_request_size=MAX_BATCH_BYTES + 4096,
        )
        await producer.start()
        self.producer = producer
        reader = AIOKafkaConsumer(**self._options(), enable_auto_commit=False, group_id=None)
        await reader.start()
        self._reader = reader
        found = await producer.partitions_for(self.name)
        if found and len(found) != self.partitions:
            # The topic decides: group placement must match what every member computes.
            log.warning(
                "state topic %s has %d partitions, not %d: using %d",
                self.name,
                len(found),
                self.partitions,
                len(found),
            )
            self.partitions = len(found)

    async def _ensure_topic(self) -> None:
        await ensure_topic(
            self._options(),
            self.name,
            self.partitions,
            self.replication_factor,
            self.min_insync_replicas,
        )

    async def stop(self) -> None:
        self.records.close()
        if self._own_upstreams:
            self.records.upstreams.close()
        if self.producer is not None:
            await self.producer.stop()
        if self._reader is not None:
            await self._reader.stop()

    # -- writes ----------------------------------------------------------------------------------

    async def send(
        self, partition: int, entries: list[tuple[bytes, bytes | None]], claim: Claim
    ) -> list[tuple[int, int]]:
        """Append entries with acks=all under `claim`'s headers, as one batch or, over
        MAX_BATCH_BYTES, several in order: [(base offset, record count)] per batch. Raises
        StateUnavailable; the caller checks where each batch landed."""
        landed: list[tuple[int, int]] = []
        try:
            for batch, count in record_batches(entries, headers(claim)):
                landed.append((await self.records.send(partition, batch), count))
        except StateUnavailableError as exc:
            raise StateUnavailable(f"write to {self.name}[{partition}] failed: {exc}") from exc
        return landed

    async def write_claim(self, partition: int, claim: Claim) -> int:
        """Append a claim; return its offset."""
        producer = self.producer
        assert producer is not None
        try:
            meta = await producer.send_and_wait(
                self.name,
                claim.value(),
                claim.key(),
                partition=partition,
                headers=headers(claim),
            )
        except Exception as exc:
            raise StateUnavailable(f"claim of {self.name}[{partition}] failed: {exc}") from exc
        return int(meta.offset)

    # -- reads -----------------------------------------------------------------------------------

    async def end_offsets(self, partitions: list[int]) -> dict[int, int]:
        reader = self._reader
        assert reader is not None
        tps = [TopicPartition(self.name, p) for p in partitions]
        try:
            ends = await reader.end_offsets(tps)
        except Exception as exc:
            raise StateUnavailable(f"end offsets of {self.name}: {exc}") from exc
        return {tp.partition: int(offset) for tp, offset in ends.items()}

    async def read(
        self, starts: dict[int, int], ends: dict[int, int] | None = None
    ) -> tuple[dict[int, list[Any]], dict[int, int]]:
        """Every record of each partition from `starts[p]` to at least its end (the end offsets
        when called, or `ends`), in whole batches: ({partition: [ConsumerRecord...]},
        {partition: the offset after the last record read})."""
        ends = dict(await self.end_offsets(list(starts)) if ends is None else ends)
        out: dict[int, list[Any]] = {p: [] for p in starts}
        todo = {p for p in starts if ends[p] > starts[p]}
        if not todo:
            return out, ends
        consumer = AIOKafkaConsumer(
            **self._options(),
            enable_auto_commit=False,
            group_id=None,
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=4 << 20,
        )
        try:
            await consumer.start()
            tps = {p: TopicPartition(self.name, p) for p in todo}
            consumer.assign(list(tps.values()))
            for p, tp in tps.items():
                consumer.seek(tp, starts[p])
            deadline = time.monotonic() + READ_TIMEOUT_S
            while todo:
                if time.monotonic() > deadline:
                    raise StateUnavailable(f"reading {self.name} {sorted(todo)} timed out")
                batches = await consumer.getmany(
                    *(tps[p] for p in todo), timeout_ms=500, max_records=10_000
                )
                for tp, records in batches.items():
                    out[tp.partition].extend(records)
                for p in list(todo):
                    position = await consumer.position(tps[p])
                    if position >= ends[p]:
                        # Whole batches come back: the end is after the last one read. (tansu
                        # 0.6 also answers ListOffsets with the last batch's base offset + 1.)
                        ends[p] = position
                        todo.discard(p)
        except StateUnavailable:
            raise
        except Exception as exc:
            raise StateUnavailable(f"reading {self.name}: {exc}") from exc
        finally:
            await consumer.stop()
        return out, ends


# pragma: no mutate end
def durability(replication_factor: int, min_insync_replicas: int, brokers: int) -> tuple[int, int]:
    """The (replication factor, min.insync.replicas) a fleet topic is created with, for the
    settings and a cluster of `brokers` brokers; a min.insync of 0 means "leave the cluster's".

    A factor below 1 means Kafka's offsets.topic.replication.factor (3), as far as the cluster
    has brokers: 3 on 3 brokers or more, else one per broker (1 on a single broker or tansu).
    A min.insync below 1 means 2 once the factor is 3 or more, as Kafka's own
    __transaction_state is created (transaction.state.log.min.isr=2): with acks=all a write is
    then on two replicas before it is acknowledged, so losing one broker loses no acknowledged
    commit and still takes writes. Below 3 replicas it is left to the cluster (requiring 2 of 2
    would stop every write while one broker is down). Explicit settings are kept as given."""
    factor = replication_factor if replication_factor >= 1 else min(3, max(1, brokers))
    if min_insync_replicas >= 1:
        return factor, min_insync_replicas
    return factor, (2 if factor >= 3 else 0)


# Not under mutation testing to the end of the module: upstream I/O, as StateTopic above.
# pragma: no mutate block
async def ensure_topic(
    options: dict[str, Any],
    name: str,
    partitions: int,
    replication_factor: int,
    min_insync_replicas: int,
    role: str = "state",
) -> None:
    """Create the compacted topic `name` unless it exists (the state topic; the fleet's security
    topic, coordinator.sidecar.fleet_security), and say which in the log (`role`: what the topic
    is for). Raises StateUnavailable, or aiokafka's errors when the upstream cannot be
    reached."""
    admin = AIOKafkaAdminClient(**options)
    await admin.start()
    try:
        replication, min_insync = replication_factor, min_insync_replicas
        if replication < 1 or min_insync < 1:
            # aiokafka cannot ask for the broker's default (KIP-464's -1): count the brokers.
            brokers = len((await admin.describe_cluster()).get("brokers") or [None])
            replication, min_insync = durability(replication_factor, min_insync_replicas, brokers)
        topic = NewTopic(
            name,
            partitions,
            replication,
            topic_configs={
                "cleanup.policy": "compact",
                **({"min.insync.replicas": str(min_insync)} if min_insync > 0 else {}),
                # Keep compaction away from recent records until the owner has rewritten
                # the keys a stale owner wrote last (module docstring: the compaction hole).
                "min.compaction.lag.ms": str(3_600_000),
            },
        )
        try:
            response = await admin.create_topics([topic])
        except TopicAlreadyExistsError:
            log_topic(role, name, None)
            return
        codes = [entry[1] for entry in getattr(response, "topic_errors", ())]
        for code in codes:
            if code not in (0, 36):  # 36: TOPIC_ALREADY_EXISTS
                raise StateUnavailable(f"cannot create {name}: error {code}")
        log_topic(role, name, None if 36 in codes else topic)
    finally:
        await admin.close()


def log_topic(role: str, name: str, created: NewTopic | None) -> None:
    """The start-up log's line for a fleet topic: created (with what) or found."""
    if created is None:
        log.info("%s topic %s: found (created before)", role, name)
        return
    configs = ", ".join(f"{k}={v}" for k, v in sorted(created.topic_configs.items()))
    log.info(
        "%s topic %s: created with %d partitions, replication factor %d (%s)",
        role,
        name,
        created.num_partitions,
        created.replication_factor,
        configs,
    )


def record_batches(
    entries: list[tuple[bytes, bytes | None]], record_headers: list[tuple[str, bytes]]
) -> list[tuple[bytes, int]]:
    """`entries` as RecordBatch v2 (aiokafka's C builder; producer id -1: neither idempotent nor
    transactional, which tansu refuses), each under MAX_BATCH_BYTES: [(batch, record count)].
    Raises StateUnavailable for a record larger than a batch."""
    out: list[tuple[bytes, int]] = []
    builder = _builder()
    count = 0
    for key, value in entries:
        if builder.append(count, None, key, value, record_headers) is None:  # full
            out.append((bytes(builder.build()), count))
            builder, count = _builder(), 0
            builder.append(0, None, key, value, record_headers)
        count += 1
        if count == 1 and builder.size() > MAX_BATCH_BYTES:
            raise StateUnavailable("a record for the state topic is larger than a batch")
    if count:
        out.append((bytes(builder.build()), count))
    return out


def _builder() -> DefaultRecordBatchBuilder:
    return DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=MAX_BATCH_BYTES,
    )


async def append(
    producer: AIOKafkaProducer,
    topic: str,
    partition: int,
    entries: list[tuple[bytes, bytes | None]],
    record_headers: list[tuple[str, bytes]],
) -> list[tuple[int, int]]:
    """`entries` appended to topic[partition] in order (acks as the producer says), as one batch
    or, over MAX_BATCH_BYTES, several: [(base offset, record count)] per batch. Raises
    StateUnavailable (also for a record larger than a batch)."""
    batches: list[tuple[Any, int]] = []
    batch = producer.create_batch()
    count = 0
    for key, value in entries:
        if batch.append(key=key, value=value, timestamp=None, headers=record_headers) is None:
            batches.append((batch, count))
            batch = producer.create_batch()
            count = 0
            if batch.append(key=key, value=value, timestamp=None, headers=record_headers) is None:
                raise StateUnavailable(f"a record for {topic} is larger than a batch")
        count += 1
    if count:
        batches.append((batch, count))
    landed: list[tuple[int, int]] = []
    try:
        for one, n in batches:
            future = await producer.send_batch(one, topic, partition=partition)
            meta = await future
            landed.append((int(meta.offset), n))
    except Exception as exc:  # aiokafka's KafkaError, a timeout, a closed producer
        raise StateUnavailable(f"write to {topic}[{partition}] failed: {exc}") from exc
    return landed

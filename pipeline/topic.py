"""A sidecar fleet's history topic as the audit's input: the part of the data source without Spark.

coordinator/sidecar/history_topic.py writes the topic (storage/history.py says what a record is).

Plan, on the driver (`plan`): the topic's partitions, each one's first and end offsets (ListOffsets
earliest and latest) and, with --since, the first offset at or after that time (ListOffsets by
timestamp); each partition's [start, end) cut into ranges of at most `max_offsets` offsets
(`split`). A range is one Spark input partition (`TopicRange`), so the audit reads as many ranges
at once as the cluster has cores.

Read, in the executors (`range_rows`): aiokafka (a maintained Kafka client; its consumer, on an
event loop of the task's own) reads one range from its start until its position reaches the
range's end, and every record becomes a row of pipeline/segments.py's COLUMNS. The executors need
the groupcoord package (aiokafka, pyarrow) and network access to the brokers.

Rules that keep it right on brokers that answer ListOffsets loosely (tansu 0.6, measured):
- By timestamp, tansu answers offset 0 whatever the time. A start too early only costs reading:
  every record is filtered on its own timestamp ([since, until)) anyway. A broker that finds no
  record at or after the time answers -1 (aiokafka: None), Kafka's "nothing that new": that
  partition is not read. The end is never asked by time: timestamps are not monotonic in the log
  (a commit summary carries its window's start, written at its end).
- Latest: tansu answers the last batch's base offset + 1, short of the end of that batch. So a
  partition's LAST range keeps every record of the batches it fetched (whole batches come back),
  up to where the fetch stopped; the ranges before it stop exactly at their end offset, so no
  record is read twice.
- A range whose reads make no progress for READ_STALL_S fails its task (Spark retries it) rather
  than hang.

Rows: coordinator_id is the FLEET's (`<cluster id>/<topic>`): the fleet is one coordinator whose
groups move between members, and the audit keys every group by (coordinator_id, group_id), so a
group is one group whichever members wrote its events. segment is `<topic>-<partition>`, offset the
record's offset: a group's events (one partition: the key is the group id) keep their log order.
written_by is the member that wrote the record (its `gc.coordinator` header). Records this reader
cannot decode are skipped and counted, and logged once per range.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

from coordinator.security.client import PLAINTEXT, ClientSecurity, aiokafka_options
from pipeline.segments import ReadStats, decode_row
from storage.history import HISTORY_TOPIC, WRITER_HEADER, HistoryDecodeError, Kind

log = logging.getLogger("groupcoord.audit")

CLIENT_ID = "groupcoord-audit"
DEFAULT_MAX_OFFSETS = 250_000  # offsets per Spark input partition
READ_STALL_S = 60.0
REQUEST_TIMEOUT_MS = 30_000


class TopicUnavailable(Exception):
    """The brokers cannot be reached, or do not have the topic (one line for the CLI)."""


@dataclass(frozen=True, slots=True)
class TopicRange:
    """One Spark input partition: offsets [start, end) of one partition (`last`: up to where the
    fetch that reached `end` stopped: module docstring)."""

    bootstrap: str
    topic: str
    partition: int
    start: int
    end: int
    last: bool
    coordinator_id: str

    @property
    def segment(self) -> str:
        return f"{self.topic}-{self.partition}"


def ranges_to_json(ranges: list[TopicRange]) -> str:
    return json.dumps([asdict(r) for r in ranges])


def ranges_from_json(text: str) -> list[TopicRange]:
    return [TopicRange(**item) for item in json.loads(text or "[]")]


def split(begin: int, start: int | None, end: int, max_offsets: int) -> list[tuple[int, int, bool]]:
    """[start, end) of one partition as (start, end, last) ranges of at most max_offsets offsets.
    `start` None: nothing at or after --since in this partition."""
    if start is None:
        return []
    start = min(max(start, begin), end)
    out = []
    while start < end:
        stop = min(start + max(1, max_offsets), end)
        out.append((start, stop, stop == end))
        start = stop
    return out


def plan(
    bootstrap: str,
    topic: str = HISTORY_TOPIC,
    *,
    since_ms: int | None = None,
    max_offsets: int = DEFAULT_MAX_OFFSETS,
    security: ClientSecurity = PLAINTEXT,
) -> list[TopicRange]:
    """The ranges to read (module docstring). Raises TopicUnavailable."""
    try:
        return asyncio.run(_plan(bootstrap, topic, since_ms, max_offsets, security))
    except TopicUnavailable:
        raise
    except Exception as exc:  # aiokafka's KafkaError, OSError, a timeout
        raise TopicUnavailable(f"{bootstrap}: {type(exc).__name__}: {exc}") from exc


async def _plan(
    bootstrap: str, topic: str, since_ms: int | None, max_offsets: int, security: ClientSecurity
) -> list[TopicRange]:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    common: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "client_id": CLIENT_ID,
        "request_timeout_ms": REQUEST_TIMEOUT_MS,
        **aiokafka_options(security),
    }
    admin = AIOKafkaAdminClient(**common)
    await admin.start()
    consumer = AIOKafkaConsumer(**common, group_id=None, enable_auto_commit=False)
    try:
        cluster = (await admin.describe_cluster()).get("cluster_id") or bootstrap
        await consumer.start()
        # Asked first, by listing (a Metadata of all topics creates none: tansu creates a topic
        # that a Metadata names, whatever allow_auto_topic_creation says).
        if topic not in await consumer.topics():
            raise TopicUnavailable(f"{bootstrap} has no topic {topic}")
        # The partitions from a Metadata that names the topic: against Kafka, a consumer that
        # subscribed to nothing knows no topic's partitions (partitions_for_topic is None: the
        # audit planned no range at all); against tansu it happened to know them.
        (described,) = await admin.describe_topics([topic])
        partitions = sorted(p["partition"] for p in described["partitions"])
    except BaseException:
        await consumer.stop()
        raise
    finally:
        await admin.close()
    try:
        tps = [TopicPartition(topic, p) for p in partitions]
        begins = await consumer.beginning_offsets(tps)
        ends = await consumer.end_offsets(tps)
        starts: dict[Any, int | None] = dict(begins)
        if since_ms is not None and tps:
            found = await consumer.offsets_for_times(dict.fromkeys(tps, max(0, since_ms)))
            starts = {tp: None if found.get(tp) is None else found[tp].offset for tp in tps}
    finally:
        await consumer.stop()
    coordinator_id = f"{cluster}/{topic}"
    return [
        TopicRange(bootstrap, topic, tp.partition, lo, hi, last, coordinator_id)
        for tp in tps
        for lo, hi, last in split(begins[tp], starts[tp], ends[tp], max_offsets)
    ]


def range_rows(
    ref: TopicRange,
    *,
    groups: frozenset[str] | None = None,
    since_ms: int | None = None,
    until_ms: int | None = None,
    stats: ReadStats | None = None,
    security: ClientSecurity = PLAINTEXT,
) -> Iterator[list[Any]]:
    """The rows of one range, in COLUMNS order (`ts` in ms since the epoch)."""
    stats = stats if stats is not None else ReadStats()
    group_keys = None if groups is None else {g.encode("utf-8", "surrogatepass") for g in groups}
    low = since_ms if since_ms is not None else -(2**63)
    high = until_ms if until_ms is not None else 2**63
    undecodable = stats.undecodable
    for record in _records(ref, security):
        stats.entries += 1
        key, value = record.key, record.value
        if key is None or value is None or len(value) < 2 or value[1] == Kind.SEGMENT_STARTED:
            continue
        if group_keys is not None and key not in group_keys:
            continue
        ts = record.timestamp
        if not low <= ts < high:
            continue
        writer = None
        for name, header in record.headers or ():
            if name == WRITER_HEADER:
                writer = header.decode("utf-8", "replace")
        try:
            row = decode_row(
                value,
                coordinator_id=ref.coordinator_id,
                segment=ref.segment,
                offset=record.offset,
                ts=ts,
                group_id=key.decode("utf-8", "surrogatepass"),
                written_by=writer,
            )
        except HistoryDecodeError:
            stats.undecodable += 1
            continue
        stats.rows += 1
        yield row
    if stats.undecodable > undecodable:
        log.warning(
            "%s offsets %d-%d: %d record(s) this reader cannot decode, skipped",
            ref.segment,
            ref.start,
            ref.end,
            stats.undecodable - undecodable,
        )


def _records(ref: TopicRange, security: ClientSecurity) -> Iterator[Any]:
    """The records of one range, read with aiokafka on a loop of this generator's own (it runs
    only while a fetch is awaited; the caller consumes the rows in between)."""
    from aiokafka import TopicPartition

    loop = asyncio.new_event_loop()
    tp = TopicPartition(ref.topic, ref.partition)
    consumer: Any = None
    try:
        consumer = loop.run_until_complete(_open(ref, tp, security))
        position = ref.start
        progress_at = time.monotonic()
        while position < ref.end:
            fetched = loop.run_until_complete(
                consumer.getmany(tp, timeout_ms=500, max_records=20_000)
            )
            for record in fetched.get(tp, ()):
                if record.offset >= ref.end and not ref.last:
                    return  # the next range's first record
                yield record
            now_at = loop.run_until_complete(consumer.position(tp))
            if now_at > position:
                position, progress_at = now_at, time.monotonic()
            elif time.monotonic() - progress_at > READ_STALL_S:
                raise TimeoutError(
                    f"{ref.segment}: no progress past offset {position} (reading to {ref.end}) "
                    f"in {READ_STALL_S:.0f} s"
                )
    finally:
        if consumer is not None:
            loop.run_until_complete(consumer.stop())
        loop.close()


async def _open(ref: TopicRange, tp: Any, security: ClientSecurity) -> Any:
    """A consumer of `tp` at the range's start (made on the running loop, as aiokafka wants)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        bootstrap_servers=ref.bootstrap,
        client_id=CLIENT_ID,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",  # retention deleted the start since the plan: go on after
        max_partition_fetch_bytes=8 << 20,
        fetch_max_bytes=16 << 20,
        **aiokafka_options(security),
    )
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()
        raise
    consumer.assign([tp])
    consumer.seek(tp, ref.start)
    return consumer

"""Records for share groups, read from the upstream partition leaders with plain Fetch (KIP-932
through the sidecar: the upstream knows nothing of share groups).

- `fetch`: one partition from `offset`, at the group's `share.isolation.level` (Kafka's default
  read_uncommitted: up to the high watermark; read_committed: nothing past the last stable
  offset); the answer is split into its record batches (`batches`), trimmed to whole batches (a
  batch cut short by MaxBytes is left for the next fetch), and `deliverable` names the batches a
  consumer may be given: never a control batch and, read_committed, never a batch of an aborted
  transaction (Kafka's AbortedTransactions walk, as its consumer's CompletedFetch does it).
- `start_offset`: ListOffsets latest (-1) or earliest (-2), for share.auto.offset.reset.
- A long-polling Fetch goes on a pooled link of its own (Broker.call), never on the control link
  that the sidecar's other requests share.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from datetime import timedelta
from typing import Final

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.fetch.v12.response import FetchResponse
from kio.schema.list_offsets.v5.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.list_offsets.v5.response import ListOffsetsResponse
from kio.serial import entity_reader
from kio.static.primitive import i32Timedelta

from coordinator.sidecar.rewrite import RewriteError, decode_response
from coordinator.sidecar.upstream import Broker
from protocol.varint import skip_tagged_fields

LATEST: Final = -1
EARLIEST: Final = -2
READ_UNCOMMITTED: Final = 0
READ_COMMITTED: Final = 1
_FETCH_VERSION: Final = 12
_BATCH_HEAD = struct.Struct(">qi")  # base offset, batch length
_BATCH_HEAD_BYTES: Final = 61  # a v2 batch header, through the records count
_ATTR_TRANSACTIONAL: Final = 0x10
_ATTR_CONTROL: Final = 0x20


@dataclass(frozen=True, slots=True)
class Batch:
    base_offset: int
    last_offset: int
    producer_id: int
    transactional: bool
    control: bool
    start: int  # its bytes in the fetched records
    end: int


@dataclass(frozen=True, slots=True)
class Fetched:
    error: ErrorCode
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""  # whole batches only
    batches: tuple[Batch, ...] = ()
    deliverable: tuple[Batch, ...] = ()


def split_batches(records: bytes) -> list[Batch]:
    """The whole v2 record batches in `records`, in order (a trailing partial batch is left out;
    older magic is not read: KIP-932 brokers only store v2)."""
    out: list[Batch] = []
    pos = 0
    size = len(records)
    while pos + _BATCH_HEAD_BYTES <= size:
        base, length = _BATCH_HEAD.unpack_from(records, pos)
        end = pos + 12 + length
        if end > size or length < _BATCH_HEAD_BYTES - 12:
            break
        attributes = struct.unpack_from(">h", records, pos + 21)[0]
        last_delta = struct.unpack_from(">i", records, pos + 23)[0]
        producer_id = struct.unpack_from(">q", records, pos + 43)[0]
        out.append(
            Batch(
                base_offset=base,
                last_offset=base + last_delta,
                producer_id=producer_id,
                transactional=bool(attributes & _ATTR_TRANSACTIONAL),
                control=bool(attributes & _ATTR_CONTROL),
                start=pos,
                end=end,
            )
        )
        pos = end
    return out


def deliverable(batches: list[Batch], aborted: list[tuple[int, int]]) -> list[Batch]:
    """The data batches of committed (or non-transactional) records: Kafka's read_committed
    filter. `aborted`: (producer_id, first_offset) of the transactions aborted in the range."""
    pending = sorted(aborted, key=lambda a: a[1])
    active: set[int] = set()
    out: list[Batch] = []
    i = 0
    for batch in batches:
        while i < len(pending) and pending[i][1] <= batch.last_offset:
            active.add(pending[i][0])
            i += 1
        if batch.control:
            if batch.transactional:
                active.discard(batch.producer_id)  # the abort (or commit) marker ends it
            continue
        if batch.transactional and batch.producer_id in active:
            continue
        out.append(batch)
    return out


async def fetch(
    broker: Broker,
    topic: str,
    partition: int,
    offset: int,
    max_bytes: int,
    max_wait_ms: int,
    read_committed: bool = False,
) -> Fetched:
    """One partition's records from `offset` (module docstring). Raises UpstreamUnavailable."""
    request = FetchRequest(
        max_wait=i32Timedelta.parse(timedelta(milliseconds=max_wait_ms)),
        min_bytes=1,  # type: ignore[arg-type]
        max_bytes=max_bytes,  # type: ignore[arg-type]
        isolation_level=READ_COMMITTED if read_committed else READ_UNCOMMITTED,  # type: ignore[arg-type]
        topics=(
            FetchTopic(
                topic=topic,  # type: ignore[arg-type]
                partitions=(
                    FetchPartition(
                        partition=partition,  # type: ignore[arg-type]
                        fetch_offset=offset,  # type: ignore[arg-type]
                        partition_max_bytes=max_bytes,  # type: ignore[arg-type]
                    ),
                ),
            ),
        ),
        forgotten_topics_data=(),
    )
    frame = await broker.call(request, timeout_s=max_wait_ms / 1000 + 10)
    response = _decode_fetch(frame)
    if response.error_code != ErrorCode.none:
        return Fetched(response.error_code)
    for t in response.responses:
        for p in t.partitions:
            if p.partition_index != partition:
                continue
            if p.error_code != ErrorCode.none:
                return Fetched(p.error_code)
            records = bytes(p.records or b"")
            batches = split_batches(records)
            aborted = [
                (int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions or ()
            ]
            whole = records[: batches[-1].end] if batches else b""
            return Fetched(
                ErrorCode.none,
                high_watermark=int(p.high_watermark),
                last_stable_offset=int(p.last_stable_offset),
                log_start_offset=int(p.log_start_offset),
                records=whole,
                batches=tuple(batches),
                deliverable=tuple(
                    deliverable(batches, aborted)
                    if read_committed
                    else (b for b in batches if not b.control)
                ),
            )
    return Fetched(ErrorCode.unknown_topic_or_partition)


def _decode_fetch(frame: bytes) -> FetchResponse:
    # Fetch v12 response: size, correlation id, tagged fields (header v1), body.
    try:
        offset = skip_tagged_fields(frame, 8)
        entity, _ = entity_reader(FetchResponse)(frame, offset)
    except Exception as exc:
        raise RewriteError(f"Fetch v{_FETCH_VERSION} response: {exc}") from exc
    return entity


async def start_offset(broker: Broker, topic: str, partition: int, timestamp: int) -> int | None:
    """The offset a share partition starts at (LATEST or EARLIEST); None on a partition error."""
    request = ListOffsetsRequest(
        replica_id=-1,  # type: ignore[arg-type]
        isolation_level=READ_COMMITTED,  # type: ignore[arg-type]
        topics=(
            ListOffsetsTopic(
                name=topic,  # type: ignore[arg-type]
                partitions=(
                    ListOffsetsPartition(partition_index=partition, timestamp=timestamp),  # type: ignore[arg-type]
                ),
            ),
        ),
    )
    frame = await broker.request(request)
    response: ListOffsetsResponse = decode_response(2, 5, frame)
    for t in response.topics:
        for p in t.partitions:
            if p.partition_index == partition and p.error_code == ErrorCode.none:
                return int(p.offset)
    return None

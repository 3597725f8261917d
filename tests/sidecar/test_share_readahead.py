"""The share partitions' read-ahead (coordinator.sidecar.share_readahead): what a ShareFetch is
answered from instead of an upstream Fetch of its own. Pure bookkeeping over real v2 record
batches (as the upstream Fetch answers them), no sockets."""

from __future__ import annotations

import struct

from kio.schema.errors import ErrorCode

from coordinator.sidecar.share_readahead import ReadAhead
from coordinator.sidecar.share_upstream import Fetched, split_batches
from tests.support.sidecar_util import record_batch

PER_BATCH = 10


def batches(first: int, count: int) -> bytes:
    """`count` record batches of PER_BATCH records from offset `first`, back to back."""
    out = b""
    for i in range(count):
        batch = bytearray(record_batch([f"k{j}" for j in range(PER_BATCH)]))
        struct.pack_into(">q", batch, 0, first + i * PER_BATCH)  # the CRC does not cover it
        out += batch
    return out


def fetched(first: int, count: int, skip: frozenset[int] = frozenset()) -> Fetched:
    """An upstream Fetch's answer: `count` batches from `first`; batches whose base offset is in
    `skip` are not deliverable (an aborted transaction's, read_committed)."""
    records = batches(first, count)
    split = tuple(split_batches(records))
    return Fetched(
        ErrorCode.none,
        high_watermark=first + count * PER_BATCH,
        log_start_offset=0,
        records=records,
        batches=split,
        deliverable=tuple(b for b in split if b.base_offset not in skip),
    )


BATCH_BYTES = len(batches(0, 1))


def offsets(view: Fetched | None) -> list[tuple[int, int]]:
    assert view is not None
    return [(b.base_offset, b.last_offset) for b in view.batches]


def records_of(view: Fetched) -> list[int]:
    """The base offsets read back from the view's own bytes (its batches' positions are right)."""
    return [struct.unpack_from(">q", view.records, b.start)[0] for b in view.batches]


def test_take_answers_whole_batches_from_the_one_holding_the_offset() -> None:
    ra: ReadAhead[str] = ReadAhead(limit=100 * BATCH_BYTES)
    ra.keep("p", fetched(0, 5), False)
    view = ra.take("p", 15, 2 * BATCH_BYTES, False)
    assert offsets(view) == [(10, 19), (20, 29)]
    assert view is not None and records_of(view) == [10, 20]
    # at least one batch, however small max_bytes is (KIP-74)
    assert offsets(ra.take("p", 40, 1, False)) == [(40, 49)]
    # past the buffer, or below what it still holds: the caller fetches upstream
    assert ra.take("p", 50, BATCH_BYTES, False) is None
    assert ra.take("p", 5, BATCH_BYTES, False) is None  # dropped when offset 15 was taken
    assert ra.buffered("p") == (40, 49)


def test_a_refill_appends_and_a_jump_replaces() -> None:
    ra: ReadAhead[str] = ReadAhead(limit=100 * BATCH_BYTES)
    ra.keep("p", fetched(0, 3), False)
    assert ra.take("p", 20, BATCH_BYTES, False) is not None  # 0-19 dropped
    ra.keep("p", fetched(30, 2), False)  # the refill from 30
    assert ra.buffered("p") == (20, 49)
    view = ra.take("p", 20, 10 * BATCH_BYTES, False)
    assert offsets(view) == [(20, 29), (30, 39), (40, 49)]
    assert view is not None and records_of(view) == [20, 30, 40]
    assert ra.bytes == 3 * BATCH_BYTES
    ra.keep("p", fetched(100, 1), False)  # not where the buffer ends: replaces it
    assert ra.buffered("p") == (100, 109)
    assert ra.bytes == BATCH_BYTES


def test_a_refill_past_a_compacted_gap_appends() -> None:
    ra: ReadAhead[str] = ReadAhead(limit=100 * BATCH_BYTES)
    ra.keep("p", fetched(0, 2), False)
    ra.keep("p", fetched(50, 1), False, fetched_from=20)  # 20-49 compacted away upstream
    assert ra.buffered("p") == (0, 59)
    assert offsets(ra.take("p", 15, 10 * BATCH_BYTES, False)) == [(10, 19), (50, 59)]
    ra.keep("p", fetched(100, 1), False, fetched_from=100)  # asked from elsewhere: replaces
    assert ra.buffered("p") == (100, 109)


def test_bounded_in_bytes_per_partition_and_in_all() -> None:
    ra: ReadAhead[str] = ReadAhead(limit=4 * BATCH_BYTES, total=6 * BATCH_BYTES)
    assert ra.wanted("a", 0) == 4 * BATCH_BYTES  # nothing held
    ra.keep("a", fetched(0, 1), False)
    assert ra.wanted("a", 0) == 3 * BATCH_BYTES  # below half its limit: refill up to the limit
    ra.keep("a", fetched(10, 1), False)
    assert ra.wanted("a", 0) == 0  # half its limit held
    assert ra.wanted("a", 10) == 3 * BATCH_BYTES  # counted from the offset the consumer is at
    ra.keep("b", fetched(0, 3), False)
    assert ra.bytes == 5 * BATCH_BYTES
    assert ra.wanted("b", 0) == 0
    assert ra.wanted("c", 0) == 0  # another 4 batches would pass the total
    ra.keep("c", fetched(0, 3), False)  # kept all the same: the least recently used goes
    assert ra.buffered("a") is None
    assert ra.bytes == 6 * BATCH_BYTES <= ra.total


def test_deliverable_flags_survive_trims_and_refills() -> None:
    ra: ReadAhead[str] = ReadAhead(limit=100 * BATCH_BYTES)
    ra.keep("p", fetched(0, 3, skip=frozenset({10})), True)
    ra.keep("p", fetched(30, 2, skip=frozenset({40})), True)
    view = ra.take("p", 0, 10 * BATCH_BYTES, True)
    assert view is not None
    assert [b.base_offset for b in view.deliverable] == [0, 20, 30]
    # the group's isolation level changed: what was read under the other one is not used
    assert ra.take("p", 0, BATCH_BYTES, False) is None
    assert ra.buffered("p") is None


def test_an_error_or_empty_answer_keeps_nothing() -> None:
    ra: ReadAhead[str] = ReadAhead()
    ra.keep("p", Fetched(ErrorCode.offset_out_of_range), False)
    ra.keep("p", Fetched(ErrorCode.none), False)
    assert ra.buffered("p") is None and ra.bytes == 0

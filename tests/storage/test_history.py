"""The history log: codec round trips (Hypothesis), versioning rules, segment files and retention,
the event translator, and the recorder's never-block / never-fail guarantees. No Spark here."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.events import (
    GroupMetadataHashChanged,
    LeaveReason,
    MemberLeft,
    OffsetsCommitted,
    RebalanceCause,
    RebalanceStarted,
)
from coordinator.serve import history
from coordinator.serve.history import (
    COMMIT_WINDOW_MS,
    HistoryRecorder,
    HistorySettings,
    HistoryTranslator,
)
from pipeline.segments import SegmentRef, find_segments, segment_rows
from storage.entry import EntryReader
from storage.history import (
    CODEC_VERSION,
    FIELD_TYPES,
    KIND_FIELDS,
    HistoryDecodeError,
    HistoryEvent,
    Kind,
    decode_event,
    decode_fields,
    encode_event,
    encode_fields,
    make_row_decoder,
)
from storage.history_log import HistoryLog, list_segment_files, read_segment
from tests.support.fakeclock import Harness

# -- codec ----------------------------------------------------------------------------------------

_text = st.text(max_size=40)
_VALUES = {
    "str": st.one_of(st.none(), _text),
    "int": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "strs": st.lists(_text, max_size=5).map(tuple),
}


@st.composite
def history_events(draw: st.DrawFn) -> HistoryEvent:
    kind = draw(st.sampled_from(list(Kind)))
    fields = {name: draw(_VALUES[FIELD_TYPES[name]]) for name in KIND_FIELDS[kind]}
    ts = draw(st.integers(min_value=0, max_value=2**62))
    return HistoryEvent(kind, ts, draw(_text), fields)


@given(history_events())
def test_codec_round_trip(event: HistoryEvent) -> None:
    key, value = encode_event(event)
    assert value[0] == CODEC_VERSION and value[1] == event.kind
    assert decode_event(key, value, event.timestamp_ms) == event


_POSITIONS = {name: i for i, name in enumerate(FIELD_TYPES)}
_ROW_DECODER = make_row_decoder(_POSITIONS)


@given(history_events(), st.binary(max_size=8))
def test_the_bulk_row_decoder_agrees_with_the_codec(event: HistoryEvent, extra: bytes) -> None:
    _, value = encode_event(event)
    row: list[object] = [None] * len(_POSITIONS)
    assert _ROW_DECODER(value + extra, row) == event.kind
    expected: list[object] = [None] * len(_POSITIONS)
    for name, v in event.fields.items():
        expected[_POSITIONS[name]] = list(v) if isinstance(v, tuple) else v
    assert row == expected


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_the_bulk_row_decoder_raises_only_the_codec_error(data: bytes) -> None:
    row: list[object] = [None] * len(_POSITIONS)
    with contextlib.suppress(HistoryDecodeError):
        _ROW_DECODER(data, row)


@given(history_events(), st.binary(min_size=1, max_size=20))
def test_a_v1_reader_ignores_fields_added_at_the_end(event: HistoryEvent, extra: bytes) -> None:
    key, value = encode_event(event)
    assert decode_event(key, value + extra, event.timestamp_ms) == event


def test_unknown_kind_and_unknown_version() -> None:
    assert decode_fields(bytes([CODEC_VERSION, 200]) + b"whatever") == (200, ())
    assert decode_event(b"g", bytes([CODEC_VERSION, 200]), 0) is None
    value = encode_fields(Kind.GROUP_EMPTIED, (3,))
    with pytest.raises(HistoryDecodeError, match="version 2"):
        decode_fields(bytes([2]) + value[1:])


@settings(max_examples=300)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_the_codec_error_only(data: bytes) -> None:
    with contextlib.suppress(HistoryDecodeError):
        decode_fields(data)


def test_truncated_value_is_a_decode_error() -> None:
    value = encode_fields(Kind.MEMBER_JOINED, ("m-1", None, "client", "/127.0.0.1"))
    for cut in range(2, len(value)):
        with pytest.raises(HistoryDecodeError):
            decode_fields(value[:cut])


def test_encoder_refuses_wrong_types() -> None:
    with pytest.raises(TypeError):
        encode_fields(Kind.GROUP_EMPTIED, ("3",))
    with pytest.raises(ValueError):
        encode_fields(Kind.GROUP_EMPTIED, ())


# -- segment files --------------------------------------------------------------------------------


def _rows(n: int, start_ms: int = 1_000, group: str = "g") -> list[tuple[int, bytes, bytes]]:
    value = encode_fields(Kind.GROUP_EMPTIED, (7,))
    return [(start_ms + i, group.encode(), value) for i in range(n)]


def _log(path: Path, **kw: int) -> HistoryLog:
    opts = {"retention_ms": 10**12, "retention_bytes": 1 << 30, "segment_bytes": 4096}
    opts.update(kw)
    return HistoryLog(path, host="h", **opts)


def test_segments_roll_start_with_a_header_and_keep_offsets(tmp_path: Path) -> None:
    log = _log(tmp_path)
    assert log.append(_rows(300)) == 300
    log.close()
    files = list_segment_files(tmp_path)
    assert len(files) > 2
    offsets: list[int] = []
    for path in files:
        entries = list(read_segment(path))
        head = decode_fields(entries[0].value or b"")
        assert head == (Kind.SEGMENT_STARTED, (log.coordinator_id, "h"))
        assert int(path.name.split(".")[0]) == entries[0].offset
        assert path.stat().st_size <= 4096 + 200
        offsets += [e.offset for e in entries]
    assert offsets == list(range(len(offsets)))
    assert len(offsets) == 300 + len(files)


def test_reopen_continues_offsets_in_a_new_segment_after_a_torn_tail(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_rows(10))
    log.close()
    last = list_segment_files(tmp_path)[-1]
    with last.open("ab") as f:
        f.write(b"GCe\x01torn")  # a crash mid-append
    again = _log(tmp_path)
    assert again.coordinator_id == log.coordinator_id
    again.append(_rows(5))
    again.close()
    files = list_segment_files(tmp_path)
    assert len(files) == 2
    second = list(read_segment(files[1]))
    assert second[0].offset == 11  # 10 rows + the first header
    reader = EntryReader(last.read_bytes())
    assert len(list(reader)) == 11 and reader.tail_bytes == 8


def test_time_roll(tmp_path: Path) -> None:
    log = _log(tmp_path, roll_ms=1_000)
    log.append(_rows(5, start_ms=0))
    log.append(_rows(5, start_ms=5_000))
    log.close()
    assert len(list_segment_files(tmp_path)) == 2


def test_retention_by_size_deletes_the_oldest_closed_segments(tmp_path: Path) -> None:
    log = _log(tmp_path, retention_bytes=16_384, segment_bytes=4096)
    log.append(_rows(2_000))
    before = list_segment_files(tmp_path)
    deleted = log.enforce_retention(now_ms=0)
    after = list_segment_files(tmp_path)
    assert deleted == [p.name for p in before[: len(deleted)]]
    assert after == before[len(deleted) :]
    assert sum(p.stat().st_size for p in after) <= 16_384
    assert log.size_bytes == sum(p.stat().st_size for p in after)
    log.close()


def test_retention_by_time_uses_the_last_write_and_spares_the_active_segment(
    tmp_path: Path,
) -> None:
    log = _log(tmp_path, retention_ms=60_000)
    log.append(_rows(200))
    files = list_segment_files(tmp_path)
    assert len(files) >= 3
    now_ms = 10_000_000_000_000
    old_s = (now_ms - 120_000) / 1000
    for path in files:  # every segment last written two minutes before "now"
        os.utime(path, (old_s, old_s))
    os.utime(files[1], (now_ms / 1000, now_ms / 1000))  # ... except the second one
    assert log.enforce_retention(now_ms) == [files[0].name]  # oldest first, stops at a young one
    assert list_segment_files(tmp_path) == files[1:]
    # The active segment is never deleted, however old.
    log2 = _log(tmp_path / "b", retention_ms=60_000)
    log2.append(_rows(3))
    (only,) = list_segment_files(tmp_path / "b")
    os.utime(only, (old_s, old_s))
    assert log2.enforce_retention(now_ms) == []
    log.close()
    log2.close()


# -- translator and recorder ----------------------------------------------------------------------


def _kinds(rows: list[tuple[int, str, Kind, tuple[object, ...]]]) -> list[str]:
    return [r[2].name.lower() for r in rows]


def test_translator_over_a_real_core_flow() -> None:
    h = Harness()
    members, leader, generation = h.stable_group("g", 2)
    h.commit("g", {("orders", 0): 5}, generation=generation, member_id=leader)
    h.leave("g", (members[0], None))
    t = HistoryTranslator()
    rows: list[tuple[int, str, Kind, tuple[object, ...]]] = []
    for i, event in enumerate(h.events):
        t.translate(1_000 + i, event, rows)
    t.close_windows(None, rows)
    assert _kinds(rows) == [
        "group_created",
        "member_joined",
        "rebalance_started",
        "member_joined",
        "join_phase_completed",
        "protocol_selected",
        "rebalance_completed",
        "member_left",
        "rebalance_started",
        "offsets_committed",
    ]
    by_kind = {r[2]: r for r in rows}
    left = by_kind[Kind.MEMBER_LEFT][3]
    assert left == (members[0], None, "c0", "/127.0.0.1", "left")  # MemberLeft carries who
    assert by_kind[Kind.PROTOCOL_SELECTED][3] == ("range", None, generation)
    completed = by_kind[Kind.REBALANCE_COMPLETED][3]
    assert completed[0] == generation and completed[3] == 2 and completed[4] == "member_joined"
    assert by_kind[Kind.OFFSETS_COMMITTED][3] == (1, 1, COMMIT_WINDOW_MS)


def test_commit_summaries_per_group_per_minute_and_metadata_changes() -> None:
    t = HistoryTranslator()
    rows: list[tuple[int, str, Kind, tuple[object, ...]]] = []
    minute = COMMIT_WINDOW_MS
    for ts, gid, n in [(0, "a", 2), (1_000, "a", 3), (2_000, "b", 1), (minute + 5, "a", 4)]:
        t.translate(ts, OffsetsCommitted(gid, n), rows)
    assert rows == [(0, "a", Kind.OFFSETS_COMMITTED, (2, 5, minute))]  # a's first minute ended
    t.close_windows(minute + 10, rows)  # b's minute is over; a's second one is not
    assert rows[1:] == [(0, "b", Kind.OFFSETS_COMMITTED, (1, 1, minute))]
    t.close_windows(None, rows)
    assert rows[2:] == [(minute, "a", Kind.OFFSETS_COMMITTED, (1, 4, minute))]
    t.translate(9, GroupMetadataHashChanged("a", ("orders",), 9), rows)
    assert rows[-1] == (9, "a", Kind.METADATA_CHANGED, (("orders",),))


def test_recorder_thread_writes_and_close_flushes(tmp_path: Path) -> None:
    h = Harness()
    h.stable_group("g", 3)
    rec = HistoryRecorder(tmp_path / "history", HistorySettings(flush_interval_ms=20))
    rec.start()
    for event in h.events:
        rec.record(event)
    rec.close()
    (ref,) = find_segments([tmp_path])
    rows = list(segment_rows(ref))
    assert [r[5] for r in rows].count("member_joined") == 3
    assert rec.written == len(rows)
    assert rows[0][0] == rec.coordinator_id
    assert rec.dropped == rec.lost == rec.write_errors == 0


def test_a_burst_is_written_before_the_flush_interval(tmp_path: Path) -> None:
    """A join storm's events are written as they come (their queue, freed at once, fragmented
    the allocator), not held for the interval -- an hour here, so only the wake can write."""
    rec = HistoryRecorder(tmp_path / "history", HistorySettings(flush_interval_ms=3_600_000))
    rec.start()
    try:
        for i in range(history._WAKE_AT_QUEUED + 1):
            rec.record(RebalanceStarted(f"g{i}", RebalanceCause.MEMBER_JOINED, "m", i))
        deadline = time.monotonic() + 10
        while rec.written < history._WAKE_AT_QUEUED and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rec.written > history._WAKE_AT_QUEUED
    finally:
        rec.close()


def test_a_full_queue_drops_and_counts_instead_of_blocking(tmp_path: Path) -> None:
    rec = HistoryRecorder(tmp_path, HistorySettings(max_queued_events=3))
    for i in range(5):
        rec.record(OffsetsCommitted(f"g{i}", 1))
    assert (rec.received, rec.dropped) == (3, 2)


def test_a_failing_disk_loses_history_but_never_raises(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    rec = HistoryRecorder(blocker / "history", HistorySettings())
    sinks: list[object] = []
    assert rec.attach(sinks) is False  # cannot open: logged, the coordinator runs without it
    assert sinks == []
    rec.record(MemberLeft("g", "m", None, LeaveReason.EXPIRED))  # even if fed anyway
    assert rec.flush(final=True) == 0
    assert rec.write_errors >= 1 and rec.lost == 1


def test_segment_reader_skips_damage_and_reads_the_header_id(tmp_path: Path) -> None:
    log = _log(tmp_path)
    log.append(_rows(20))
    log.close()
    (path,) = list_segment_files(tmp_path)
    data = bytearray(path.read_bytes())
    data[300] ^= 0xFF  # bit rot inside one entry
    path.write_bytes(bytes(data))
    (tmp_path / "coordinator.id").unlink()  # the header still names the coordinator
    ref = SegmentRef(str(path), None, len(data), 0)
    rows = list(segment_rows(ref))
    assert 17 <= len(rows) < 20
    assert {r[0] for r in rows} == {log.coordinator_id}

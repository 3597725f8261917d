"""The group history recorder: the core's events -> the history log, off the request path.

`HistoryRecorder.record` is an event sink (`Server.event_sinks`). Per event it does one clock read
and one deque append: no encoding, no I/O, no lock. A daemon thread wakes every
`flush_interval_ms`, takes everything queued, turns the events into history entries
(storage/history.py), writes them to the history log (storage/history_log.py) in one write per
segment, and applies retention now and then.

Invariants:
- The request path never waits for history. The queue is bounded: when the disk is slower than the
  events (or failing), new events are dropped and counted (`dropped`); nothing blocks.
- History never affects group state: a failed write drops that batch, counts it (`write_errors`;
  its entries in `lost`), logs it (at most once a minute), and the next batch opens a fresh
  segment.
- No fsync per batch: a crash loses at most the last interval. `close()` writes what is queued and
  fsyncs.
- Event order is kept: one producer (the event loop), one consumer (the thread).

What is derived here rather than in the core (to keep the core's events small):
- a wall-clock timestamp: the sink runs synchronously inside `Runtime.apply`, right after the
  core produced the event, so the time of the sink call is the time of the event; durations come
  from the events' monotonic `now_ms` fields;
- PROTOCOL_SELECTED, when a join phase picks a protocol other than the group's previous one
  (after a restart the previous one is unknown, so the first selection is recorded again);
- GROUP_EMPTIED, when a rebalance completes with no members;
- OFFSETS_COMMITTED summaries: per group per minute, the number of commits and of partitions.

In a sidecar fleet the same recorder writes to a topic on the upstream instead
(coordinator/sidecar/history_topic.py subclasses it: same queue, same rows, same drop-and-count
rule and counters; only `_run`'s writing differs).

`recent_rebalances` reads the log back: the last completed rebalances of each group, which the
status page shows again after a restart (coordinator.serve.status, coordinator.serve.http).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from coordinator.core.events import (
    Event,
    GroupCreated,
    GroupDeleted,
    GroupMetadataHashChanged,
    JoinPhaseCompleted,
    MemberJoined,
    MemberLeft,
    MemberReconciled,
    OffsetsCommitted,
    OffsetsDeleted,
    OffsetsExpired,
    RebalanceCompleted,
    RebalanceStarted,
    RebalanceTrigger,
)
from coordinator.serve.config import Settings
from storage.history import (
    FieldValue,
    HistoryDecodeError,
    HistoryEvent,
    Kind,
    decode_event,
    encode_fields,
)
from storage.history_log import HISTORY_DIR, HistoryLog, list_segment_files, read_segment

log = logging.getLogger("groupcoord.history")

COMMIT_WINDOW_MS = 60_000
RESTORE_MAX_BYTES = 64 << 20  # how much of the newest history `recent_rebalances` reads at most
_RETENTION_CHECK_MS = 60_000
_ERROR_LOG_INTERVAL_MS = 60_000

Row = tuple[int, str, Kind, tuple[FieldValue, ...]]
"""(timestamp_ms, group_id, kind, the kind's fields): one history entry before encoding."""


@dataclass(frozen=True, slots=True)
class HistorySettings:
    enabled: bool = True
    retention_ms: int = 7 * 24 * 3600 * 1000  # Kafka's log.retention.hours default, 168
    retention_bytes: int = 1 << 30
    segment_bytes: int = 16 << 20
    max_queued_events: int = 65_536
    flush_interval_ms: int = 200


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _trigger_fields(trigger: RebalanceTrigger) -> tuple[FieldValue, ...]:
    """storage.history.TRIGGER_FIELDS of a rebalance's trigger."""
    return (
        trigger.member_id,
        trigger.group_instance_id,
        trigger.client_id,
        trigger.client_host,
        trigger.topics,
    )


class HistoryTranslator:
    """Core events -> history rows. Keeps the little state the derived rows need; pure."""

    def __init__(self) -> None:
        self._protocols: dict[str, str] = {}
        # group -> [window start, commits, partitions]
        self._windows: dict[str, list[int]] = {}

    def translate(self, wall_ms: int, event: Event, out: list[Row]) -> None:
        match event:
            case MemberJoined():
                out.append(
                    (
                        wall_ms,
                        event.group_id,
                        Kind.MEMBER_JOINED,
                        (
                            event.member_id,
                            event.group_instance_id,
                            event.client_id,
                            event.client_host,
                        ),
                    )
                )
            case MemberLeft():
                out.append(
                    (
                        wall_ms,
                        event.group_id,
                        Kind.MEMBER_LEFT,
                        (
                            event.member_id,
                            event.group_instance_id,
                            event.client_id,
                            event.client_host,
                            event.reason.value,
                        ),
                    )
                )
            case RebalanceStarted():
                started = (event.cause.value, *_trigger_fields(event.trigger))
                out.append((wall_ms, event.group_id, Kind.REBALANCE_STARTED, started))
            case JoinPhaseCompleted():
                gid = event.group_id
                fields: tuple[FieldValue, ...] = (
                    event.generation_id,
                    event.protocol_name,
                    event.members,
                    event.now_ms - event.started_ms,
                )
                out.append((wall_ms, gid, Kind.JOIN_PHASE_COMPLETED, fields))
                chosen = event.protocol_name
                previous = self._protocols.get(gid)
                if chosen is not None and chosen != previous:
                    self._protocols[gid] = chosen
                    selected = (chosen, previous, event.generation_id)
                    out.append((wall_ms, gid, Kind.PROTOCOL_SELECTED, selected))
            case RebalanceCompleted():
                completed = (
                    event.generation_id,
                    event.protocol_name,
                    event.leader,
                    event.members,
                    event.cause.value,
                    event.join_completed_ms - event.started_ms,
                    event.now_ms - event.started_ms,
                    *_trigger_fields(event.trigger),
                    event.group_type,
                )
                out.append((wall_ms, event.group_id, Kind.REBALANCE_COMPLETED, completed))
                if event.members == 0:
                    row = (wall_ms, event.group_id, Kind.GROUP_EMPTIED, (event.generation_id,))
                    out.append(row)
            case MemberReconciled():
                reconciled = (event.member_id, event.member_epoch, event.reconcile_ms)
                out.append((wall_ms, event.group_id, Kind.MEMBER_RECONCILED, reconciled))
            case GroupCreated():
                out.append((wall_ms, event.group_id, Kind.GROUP_CREATED, ()))
            case GroupDeleted():
                self._close_window(event.group_id, out)
                self._protocols.pop(event.group_id, None)
                out.append((wall_ms, event.group_id, Kind.GROUP_DELETED, ()))
            case OffsetsCommitted():
                self._count_commit(wall_ms, event.group_id, event.partitions, out)
            case OffsetsExpired():
                out.append((wall_ms, event.group_id, Kind.OFFSETS_EXPIRED, (event.partitions,)))
            case OffsetsDeleted():
                out.append((wall_ms, event.group_id, Kind.OFFSETS_DELETED, (event.partitions,)))
            case GroupMetadataHashChanged():
                topics: tuple[FieldValue, ...] = (tuple(event.topics),)
                out.append((wall_ms, event.group_id, Kind.METADATA_CHANGED, topics))
            case _:
                pass  # any other event (added to events.py later) is not part of the history

    def _count_commit(self, wall_ms: int, gid: str, partitions: int, out: list[Row]) -> None:
        start = wall_ms - wall_ms % COMMIT_WINDOW_MS
        window = self._windows.get(gid)
        if window is not None and window[0] != start:
            self._close_window(gid, out)
            window = None
        if window is None:
            self._windows[gid] = [start, 1, partitions]
        else:
            window[1] += 1
            window[2] += partitions

    def _close_window(self, gid: str, out: list[Row]) -> None:
        window = self._windows.pop(gid, None)
        if window is not None:
            start, commits, partitions = window
            fields = (commits, partitions, COMMIT_WINDOW_MS)
            out.append((start, gid, Kind.OFFSETS_COMMITTED, fields))

    def close_windows(self, now_ms: int | None, out: list[Row]) -> None:
        """Summarise the commit windows that have ended by now_ms (all of them if None)."""
        for gid, window in list(self._windows.items()):
            if now_ms is None or window[0] + COMMIT_WINDOW_MS <= now_ms:
                self._close_window(gid, out)


_WAKE_AT_QUEUED = 2048  # events queued that wake the writer before its interval


class HistoryRecorder:
    """The event sink plus the writer thread. `start()`, then `record` events, then `close()`."""

    def __init__(
        self,
        directory: Path,
        settings: HistorySettings | None = None,
        *,
        clock_ms: Callable[[], int] = _wall_ms,
    ) -> None:
        self.directory = Path(directory)
        self.settings = settings = settings or HistorySettings()
        self._clock_ms = clock_ms
        self._queue: collections.deque[tuple[int, Event]] = collections.deque()
        self._limit = settings.max_queued_events
        self._translator = HistoryTranslator()
        self._log: HistoryLog | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._last_retention_ms = 0
        self._last_error_log = -_ERROR_LOG_INTERVAL_MS
        self._dropped_reported = 0
        self.received = 0
        self.dropped = 0
        self.written = 0
        self.lost = 0  # events in batches whose write failed
        self.write_errors = 0

    @property
    def where(self) -> str:
        """Where the history goes, for log lines."""
        return f"log {self.directory}"

    @classmethod
    def in_data_dir(cls, data_dir: str | Path, settings: HistorySettings) -> HistoryRecorder:
        return cls(Path(data_dir) / HISTORY_DIR, settings)

    @classmethod
    def from_settings(cls, settings: Settings) -> HistoryRecorder | None:
        """From `groupcoord serve`'s resolved settings (coordinator/serve/config.py); None when the
        history is switched off (--no-history)."""
        if not settings.history:
            return None
        return cls.in_data_dir(
            settings.data_dir,
            HistorySettings(
                retention_ms=settings.history_retention_ms,
                retention_bytes=settings.history_retention_bytes,
                segment_bytes=settings.history_segment_bytes,
            ),
        )

    def attach(self, event_sinks: list[Callable[[Event], None]]) -> bool:
        """Start and subscribe to the core's events (`Server.event_sinks`). A history that
        cannot be opened is logged and left off: the coordinator serves without it."""
        try:
            self.start()
        except OSError as exc:
            log.error("history %s unavailable, running without history: %s", self.where, exc)
            return False
        event_sinks.append(self.record)
        return True

    # -- the request path --------------------------------------------------------------------------

    def record(self, event: Event) -> None:
        """The event sink: O(1), never blocks, never raises."""
        queue = self._queue
        n = len(queue)
        if n >= self._limit:
            self.dropped += 1
            return
        queue.append((self._clock_ms(), event))
        self.received += 1
        if n == _WAKE_AT_QUEUED:
            # A burst (a join storm: several events a member) is written as it comes rather than
            # held for the flush interval: a queue of tens of thousands of events, freed at
            # once, left holes in the allocator's pools that stayed in RSS (issue 2, measured).
            self._wake.set()

    # -- lifecycle ---------------------------------------------------------------------------------

    def open(self) -> None:
        """Open the log (scans the last segment: call it off the event loop, or at start-up)."""
        if self._log is None:
            s = self.settings
            self._log = HistoryLog(
                self.directory,
                retention_ms=s.retention_ms,
                retention_bytes=s.retention_bytes,
                segment_bytes=s.segment_bytes,
            )

    def start(self) -> None:
        self.open()
        self._thread = threading.Thread(target=self._run, name="groupcoord-history", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is queued (and the open commit summaries), fsync, stop the thread."""
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None
        else:
            self.flush(final=True)

    @property
    def coordinator_id(self) -> str | None:
        return None if self._log is None else self._log.coordinator_id

    # -- the writer thread -------------------------------------------------------------------------

    def _run(self) -> None:
        interval = self.settings.flush_interval_ms / 1000
        while True:
            self._wake.wait(interval)
            self._wake.clear()  # `close` sets `_stopping` before it wakes us
            stopping = self._stopping
            try:
                self.flush(final=stopping)
            except Exception:  # a bug here must cost history, never the thread or the server
                self.write_errors += 1
                log.exception("history writer failed; continuing")
            if stopping:
                return

    def flush(self, *, final: bool = False) -> int:
        """Process everything queued now; returns the entries written. Called by the thread (or a
        test, when no thread was started)."""
        rows, now = self.take_rows(final=final)
        written = 0
        if rows:
            written = self._write(rows)
        self.report_drops(now)
        if final or now - self._last_retention_ms >= _RETENTION_CHECK_MS:
            self._last_retention_ms = now
            self._retain(now)
        if final and self._log is not None:
            try:
                self._log.flush()
                self._log.close()
            except OSError as exc:
                self._failed(exc, 0)
        return written

    def take_rows(self, *, final: bool) -> tuple[list[Row], int]:
        """Everything queued, as history rows (with the commit summaries that ended; all of them
        if `final`), and the time now."""
        queue = self._queue
        batch = [queue.popleft() for _ in range(len(queue))]
        now = self._clock_ms()
        rows: list[Row] = []
        translate = self._translator.translate
        for wall_ms, event in batch:
            translate(wall_ms, event, rows)
        self._translator.close_windows(None if final else now, rows)
        return rows, now

    def report_drops(self, now: int) -> None:
        """Log the events dropped so far, at most once a minute."""
        dropped = self.dropped
        if (
            dropped > self._dropped_reported
            and now - self._last_error_log >= _ERROR_LOG_INTERVAL_MS
        ):
            self._last_error_log = now
            log.warning(
                "history queue full: %d event(s) dropped so far (group state unaffected)", dropped
            )
            self._dropped_reported = dropped

    @property
    def readback_dir(self) -> Path | None:
        """Where the status page reads the recent rebalances back from at start-up (None: no
        local history to read)."""
        return self.directory

    def _write(self, rows: list[Row]) -> int:
        try:
            self.open()
            assert self._log is not None
            n = self._log.append(
                (ts, gid.encode("utf-8", "surrogatepass"), encode_fields(kind, fields))
                for ts, gid, kind, fields in rows
            )
        except (OSError, ValueError) as exc:
            self._failed(exc, len(rows))
            return 0
        self.written += n
        return n

    def _retain(self, now: int) -> None:
        if self._log is None:
            return
        try:
            deleted = self._log.enforce_retention(now)
        except OSError as exc:
            self._failed(exc, 0)
            return
        if deleted:
            log.info("history retention deleted %d segment(s)", len(deleted))

    def _failed(self, exc: BaseException, lost: int) -> None:
        self.write_errors += 1
        self.lost += lost
        # Start over on a fresh segment next time; the state of the failed one is unknown.
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.close()
            self._log = None
        now = self._clock_ms()
        if now - self._last_error_log >= _ERROR_LOG_INTERVAL_MS:
            self._last_error_log = now
            log.warning(
                "history write failed (%s); %d entries lost, %d so far (group state unaffected)",
                exc,
                lost,
                self.lost,
            )


def recent_rebalances(
    directory: Path,
    per_group: int,
    *,
    before_ms: int | None = None,
    max_bytes: int = RESTORE_MAX_BYTES,
) -> dict[str, list[HistoryEvent]]:
    """The last `per_group` REBALANCE_COMPLETED entries of each group in the history log under
    `directory`, oldest first: what the status page shows again after a restart.

    Bounded: the newest segments are read first, `max_bytes` of them at most (the newest one
    always), so start-up stays short whatever the retention; a group whose rebalances all lie
    further back shows none. Rebalances before a group's GROUP_DELETED belong to an earlier group
    of that name and are left out. Entries at or after `before_ms` (this run's own) are skipped,
    and so are entries this reader cannot decode. Runs off the event loop (it reads files)."""
    found: dict[bytes, list[HistoryEvent]] = {}
    closed: set[bytes] = set()  # full, or deleted before the entries still to be read
    read = 0
    for path in reversed(list_segment_files(Path(directory))):
        try:
            size = path.stat().st_size
            if read and read + size > max_bytes:
                break
            read += size
            entries = list(read_segment(path))
        except OSError as exc:
            log.warning("history segment %s unreadable for the status page: %s", path, exc)
            continue
        for entry in reversed(entries):
            value, key = entry.value, entry.key
            if value is None or len(value) < 2 or key in closed:
                continue
            if before_ms is not None and entry.timestamp_ms >= before_ms:
                continue
            code = value[1]
            if code == Kind.GROUP_DELETED:
                closed.add(key)
            elif code == Kind.REBALANCE_COMPLETED:
                try:
                    event = decode_event(key, value, entry.timestamp_ms)
                except HistoryDecodeError:
                    continue
                if event is None:
                    continue
                kept = found.setdefault(key, [])
                kept.append(event)
                if len(kept) >= per_group:
                    closed.add(key)
    return {events[0].group_id: events[::-1] for events in found.values()}

"""The local-disk log: segment files, group commit, fsync off the event loop, background compaction.

Layout: DIR/<base offset, 20 digits>.log, one per segment, plus compaction's transient
`.cleaned`/`.swap` files (storage/compaction.py) and `cleaner-offset-checkpoint` (a hint only).

Invariants:
- The event loop never touches the disk after `open`: `append` encodes entries into a pending
  buffer, which goes to one I/O thread as a whole: one write per segment, one fsync. One flush runs
  at a time; appends that arrive meanwhile share the next one (the group commit), which the
  running flush's completion starts. Under policy `always`, if appends came while a flush was out
  (concurrent writers), the next fsync starts no sooner than SYNC_SPACING_S after that one
  started: with a 0.3 ms fsync, commits at half the maximum rate otherwise went out 7 to an
  fsync, and the fsyncs (each a few VM exits) and their thread hand-offs took a third of the
  server's core (measured at 9-13k one-partition commits/s: I/O thread 22-32% of the core, 7-10%
  spaced; server CPU per commit -15%). Those appends wait for the next fsync either way, so this
  adds at most the spacing to a commit under concurrent load, and nothing to a lone writer that
  waits for each append to be durable, however many records it carries.
- `wait_durable(offset)` resolves only after a flush covering `offset` completed: an fsync for
  policy `always`, the write(2) for `interval:<ms>` (it then survives a process crash, and an fsync
  follows within the interval: the window a user accepts against power loss).
- Only the last segment can have a torn tail: a segment is fsynced before the next one is created,
  and the directory is fsynced after a create.
- A failed write or fsync fails every waiter not yet durable with LogWriteError, drops the pending
  buffer, and makes `append` raise LogUnavailableError until `recover()` has truncated the active
  segment back to its last durable size and fsynced it. Durable bytes are never rewritten.
- Compaction reads only inactive segments (already fsynced), so it never delays an fsync, and swaps
  files with the crash-safe protocol of storage/compaction.py. It runs in a worker *process*: it is
  CPU-bound Python, and on a thread it would take the GIL from the event loop for as long as it
  runs (measured: half-load commit p99 of 180-570 ms while a compaction ran). Small compactions
  (under PROCESS_COMPACTION_MIN_BYTES: a few ms of work) stay on a thread, where a process round
  trip would cost more than the stall; so does any compaction with a test's step hook or injected
  fsync, which a process could not call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path

from storage.compaction import (
    CompactionStats,
    StepHook,
    compact_segments,
    fsync_dir,
    list_segments,
    no_step,
    recover_directory,
    segment_name,
)
from storage.entry import Damage, Entry, EntryReader, encode_entry
from storage.iothread import IoThread
from storage.log import KeyValue, LoadReport, LogUnavailableError, LogWriteError

# Inactive bytes from which compaction runs in the worker process rather than on a thread.
PROCESS_COMPACTION_MIN_BYTES = 1 << 20
CLEANER_NICENESS = 10
# Policy `always`: an fsync starts at least this long after the previous one started, if appends
# came while that one was out (concurrent writers; a lone writer is never delayed).
SYNC_SPACING_S = 0.002

WriteFn = Callable[[int, bytes | memoryview], int]
FsyncFn = Callable[[int], None]
CHECKPOINT = "cleaner-offset-checkpoint"
DEFAULT_SEGMENT_BYTES = 16 * 1024 * 1024


def parse_policy(policy: str) -> int | None:
    """'always' -> None; 'interval:<ms>' -> ms."""
    if policy == "always":
        return None
    if policy.startswith("interval:") and policy[9:].isdigit() and int(policy[9:]) > 0:
        return int(policy[9:])
    raise ValueError(f"fsync policy must be 'always' or 'interval:<ms>', not {policy!r}")


@dataclass(slots=True)
class _Segment:
    base: int
    size: int  # bytes written and flushed


@dataclass(slots=True)
class _FlushResult:
    new_segments: list[_Segment] = field(default_factory=list)
    active_size: int = 0


class _UnpinnedSpawnProcess(SpawnProcess):
    """A spawned process that its parent frees to run on any CPU as soon as it exists."""

    def start(self) -> None:
        super().start()
        if self.pid is not None and hasattr(os, "sched_setaffinity"):
            with contextlib.suppress(OSError):  # it exited already; the kernel keeps the cpuset
                os.sched_setaffinity(self.pid, range(os.cpu_count() or 1))


class _UnpinnedSpawnContext(SpawnContext):
    Process = _UnpinnedSpawnProcess


def _spawn_cleaner_process() -> ProcessPoolExecutor:
    """The compaction worker's pool, its worker started, made on a short-lived thread that first
    lowers its own priority. On Linux niceness is per thread and inherited from birth by what the
    thread starts: the worker, multiprocessing's resource tracker (started with the pool's first
    lock) and the pool's manager thread. The event loop waits for the thread (5-18 ms measured).

    - Niced, like a background cleaner should be: where it shares a core with the server, the
      scheduler favours the event loop. A spawned child first imports the server's main module
      (about 0.8 s of CPU here); at nice 0 that took half the server's core for a second or two.
      Renicing the worker once it existed still left the resource tracker's start-up at nice 0
      on the server's core: loop lags of 65-71 ms as the pool came up, and a half-load commit
      p99 of ~100 ms in that second. Born niced: one lag of 12-22 ms.
    - The worker then runs on any CPU the machine (or its cpuset) allows, not only where the
      server is pinned: niced on a core that the server keeps busy, it got a tenth of that core,
      fell behind a saturating appender, and the log grew to nearly its uncompacted size (bench
      `compaction`: peak 840 MB for 860 MB of commits, with the other core idle). The spawning
      thread itself keeps the server's pin: unpinned, it was put on the core where the bench's
      load generator spins, and the spawn took 35 ms instead of 5.
    """
    made: list[ProcessPoolExecutor] = []
    failed: list[BaseException] = []

    def spawn() -> None:
        try:
            # Only where it is per thread: elsewhere it would nice the whole server.
            if sys.platform.startswith("linux"):
                with contextlib.suppress(OSError):
                    niceness = min(os.getpriority(os.PRIO_PROCESS, 0) + CLEANER_NICENESS, 19)
                    os.setpriority(os.PRIO_PROCESS, 0, niceness)  # 0 = this thread
            pool = ProcessPoolExecutor(1, mp_context=_UnpinnedSpawnContext())
            pool.submit(int)  # starts the worker now, from this thread
            made.append(pool)
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=spawn, name="groupcoord-cleaner-spawn", daemon=True)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


class DiskLog:
    """Open with `await DiskLog.open(directory, ...)`; see storage/log.py for the contract."""

    def __init__(
        self,
        directory: Path,
        *,
        policy: str = "always",
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        delete_retention_ms: int = 86_400_000,
        min_cleanable_dirty_ratio: float = 0.5,
        auto_compact: bool = True,
        fsync: FsyncFn = os.fsync,
        write: WriteFn = os.write,
        clock_ms: Callable[[], int] = _wall_ms,
        compaction_step: StepHook | None = None,
        sync_spacing_s: float = SYNC_SPACING_S,
    ) -> None:
        self.directory = Path(directory)
        self._interval_ms = parse_policy(policy)
        self.segment_bytes = segment_bytes
        self.delete_retention_ms = delete_retention_ms
        self.min_cleanable_dirty_ratio = min_cleanable_dirty_ratio
        self.auto_compact = auto_compact
        self._fsync = fsync
        self._write = write
        self._clock_ms = clock_ms
        self._compaction_step = compaction_step
        self.load_report = LoadReport()
        self.fsync_count = 0
        self.compactions = 0
        # Counters for coordinator.serve.metrics (read at scrape time on the loop thread).
        self.appends = 0
        self.appended_records = 0
        self.appended_bytes = 0
        self.reclaimed_bytes = 0
        self.on_fsync: Callable[[float], None] | None = None  # seconds; called on the I/O thread
        # Called on the loop with the durable offset as soon as a flush completes, before the
        # waiters' tasks wake (they wake a loop pass later).
        self.on_durable: Callable[[int], None] | None = None
        self._segments: list[_Segment] = []
        self._clean_end = 0  # segments with base < this have been compacted
        self._next_offset = 0
        self._pending: list[bytes | int] = []  # bytes to write, or int = roll to that base
        self._pending_end = -1  # last offset in _pending
        self._active_logical = 0  # active segment size including pending bytes
        self._written = -1
        self._durable = -1
        self._synced_upto = -1
        self._failed: LogWriteError | None = None
        self._sync_requested = False
        self.compaction_error: BaseException | None = None
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._tiebreak = itertools.count()
        self._fd = -1
        self._tail_checked = False
        self._io = IoThread("groupcoord-log-io")
        self._cleaner = ThreadPoolExecutor(1, thread_name_prefix="groupcoord-log-cleaner")
        self._cleaner_process: ProcessPoolExecutor | None = None
        self._warm_cleaner = (
            auto_compact
            and compaction_step is None
            and fsync is os.fsync
            and segment_bytes >= PROCESS_COMPACTION_MIN_BYTES
        )
        self._loop: asyncio.AbstractEventLoop | None = None  # set by `open`
        self._flushing = False  # a flush is on the I/O thread; its completion starts the next
        self._kick_scheduled = False
        self._sync_spacing = sync_spacing_s
        self._last_sync_start = 0.0
        self._overlapped = False  # appends came while the running (or last) flush was out
        self._idle: list[asyncio.Future[None]] = []  # `close` waiting for the last flush
        self._closed = False
        self._ticker: asyncio.Task[None] | None = None
        self._compaction: asyncio.Task[CompactionStats | None] | None = None

    # -- opening ---------------------------------------------------------------------------------

    @classmethod
    async def open(cls, directory: str | Path, **options: object) -> DiskLog:
        log = cls(Path(directory), **options)  # type: ignore[arg-type]
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(log._io, log._open_files)
        log._loop = loop
        if log._interval_ms is not None:
            log._ticker = loop.create_task(log._interval_loop(), name="groupcoord-log-ticker")
        return log

    def _open_files(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.load_report.recovered_files = recover_directory(self.directory, fsync=self._fsync)
        bases = list_segments(self.directory)
        if not bases:
            self._create_segment(0)
            bases = [0]
        for b in bases[:-1]:
            self._segments.append(_Segment(b, (self.directory / segment_name(b)).stat().st_size))
        # The last segment's tail is checked by the first replay (which reads it anyway: start-up
        # reads every byte once) or, if something appends first, by `_check_tail` right then.
        last = bases[-1]
        self._segments.append(_Segment(last, (self.directory / segment_name(last)).stat().st_size))
        self._next_offset = last
        # Every earlier segment was fsynced before it rolled: durable. Without this, `durable`
        # stayed -1 below `next_offset` until the tail was read, and a reply that waited for
        # "everything appended before it" during the load waited for a flush that never came.
        self._written = self._durable = self._synced_upto = self._pending_end = last - 1
        self.load_report.segments = len(self._segments)
        self._clean_end = self._read_checkpoint()

    def _check_tail(self, data: bytes | None = None, reader: EntryReader | None = None) -> None:
        """Cut a torn tail off the last segment; learn the next offset. Runs once, at start-up."""
        if self._tail_checked:
            return
        active = self._segments[-1]
        path = self.directory / segment_name(active.base)
        if reader is None:
            reader = EntryReader(path.read_bytes() if data is None else data)
            for _ in reader:
                pass
        if reader.tail_bytes:
            # A torn tail: an append that never completed, so never acknowledged. Cut it off.
            os.truncate(path, reader.valid_end)
            self.load_report.truncated_tail_bytes = reader.tail_bytes
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        if reader.tail_bytes:
            self._fsync(self._fd)
        active.size = self._active_logical = reader.valid_end
        self._next_offset = max(active.base, reader.last_offset + 1)
        self._written = self._durable = self._synced_upto = self._next_offset - 1
        self._pending_end = self._next_offset - 1
        self._tail_checked = True

    def _create_segment(self, base: int) -> int:
        fd = os.open(
            self.directory / segment_name(base), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644
        )
        fsync_dir(self.directory, self._fsync)
        return fd

    def _read_checkpoint(self) -> int:
        try:
            return int((self.directory / CHECKPOINT).read_text().strip())
        except (OSError, ValueError):
            return 0

    # -- appending -------------------------------------------------------------------------------

    @property
    def healthy(self) -> bool:
        return self._failed is None

    @property
    def durable_offset(self) -> int:
        """Every entry at or below this offset is durable (-1: none yet)."""
        return self._durable

    @property
    def next_offset(self) -> int:
        return self._next_offset

    def append(self, entries: Sequence[KeyValue], *, timestamp_ms: int | None = None) -> int:
        if self._failed is not None:
            raise LogUnavailableError("log failed; recover() first") from self._failed
        if self._closed:
            raise LogUnavailableError("log closed")
        if not self._tail_checked:
            self._check_tail()  # appending before any replay: a one-off scan at start-up
        if not entries:
            return self._next_offset - 1
        ts = self._clock_ms() if timestamp_ms is None else timestamp_ms
        offset = self._next_offset
        if self._active_logical >= self.segment_bytes:
            self._pending.append(offset)  # roll: the next bytes go to a new segment
            self._active_logical = 0
        if len(entries) == 1:  # one entry (a lone commit, a group record): no list, no join
            key, value = entries[0]
            chunk = encode_entry(offset, ts, key, value)
        else:
            chunk = b"".join(
                [encode_entry(offset + i, ts, k, v) for i, (k, v) in enumerate(entries)]
            )
        self._pending.append(chunk)
        self._overlapped |= self._flushing
        self._active_logical += len(chunk)
        self.appends += 1
        self.appended_records += len(entries)
        self.appended_bytes += len(chunk)
        self._next_offset = offset + len(entries)
        self._pending_end = self._next_offset - 1
        self._schedule_flush()
        return self._pending_end

    async def wait_durable(self, offset: int) -> None:
        if offset <= self._durable:
            return
        if self._failed is not None:
            raise self._failed
        if offset >= self._next_offset:
            raise ValueError(f"offset {offset} was never appended")
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._tiebreak), fut))
        await fut

    async def append_durable(self, entries: Sequence[KeyValue]) -> int:
        offset = self.append(entries)
        await self.wait_durable(offset)
        return offset

    async def _interval_loop(self) -> None:
        assert self._interval_ms is not None
        while not self._closed:
            await asyncio.sleep(self._interval_ms / 1000)
            if self._written > self._synced_upto:
                self._sync_requested = True
                self._schedule_flush()

    # -- flushing: driven by callbacks, one flush at a time ------------------------------------
    #
    # No task sits between the I/O thread and the runtime. When the event loop is saturated,
    # each hop through a task (the executor's future, a flusher task, a waiter's task) waits
    # behind a whole batch of requests: measured, half of a 6 ms group-commit cycle. As
    # callbacks, one pass of the loop takes a flush's completion, hands the next batch to the
    # I/O thread and calls `on_durable` (where the runtime sends the replies it held).

    def _schedule_flush(self) -> None:
        """Flush soon: after the requests the loop is handling now, so one flush carries them."""
        if not self._flushing and not self._kick_scheduled and self._loop is not None:
            self._kick_scheduled = True
            self._loop.call_soon(self._kick)

    def _kick(self, spaced: bool = False) -> None:
        """Hand everything pending to the I/O thread, unless a flush is running (its completion
        calls this again) or the log has failed; or, if the fsync spacing asks for a wait, come
        back (`spaced`) when it is over."""
        self._kick_scheduled = False
        if self._flushing:
            return
        if self._failed is not None:
            self._notify_idle()
            return
        sync = self._interval_ms is None or self._sync_requested or self._closed
        if sync and not spaced and self._pending and not self._closed:
            wait = self._last_sync_start + self._sync_spacing - time.perf_counter()
            if wait > 0 and self._overlapped and self._loop is not None:
                self._kick_scheduled = True
                # At least 1 ms: uvloop rounds timers to whole ms, and a 0 ms timer would only
                # go round the loop again until the wait is over.
                self._loop.call_later(max(wait, 0.001), self._kick, True)
                return
        ops, self._pending = self._pending, []
        upto = self._pending_end
        self._sync_requested = False
        if not ops and not (sync and upto > self._synced_upto):
            self._notify_idle()
            return
        self._flushing = True
        self._overlapped = False
        if sync:
            self._last_sync_start = time.perf_counter()
        self._io.post(self._io_job, ops, sync, upto)

    def _io_job(self, ops: list[bytes | int], sync: bool, upto: int) -> None:
        """On the I/O thread: the flush, then one callback to the loop with its outcome."""
        assert self._loop is not None
        try:
            result = self._io_flush(ops, sync)
        except Exception as exc:
            self._loop.call_soon_threadsafe(self._flush_failed, exc)
            return
        finally:
            # Written or failed, the bytes are not needed while the loop waits for more work
            # (the group records of a join storm are megabytes).
            del ops
        self._loop.call_soon_threadsafe(self._flushed, result, upto, sync)

    def _flushed(self, result: _FlushResult, upto: int, sync: bool) -> None:
        self._flushing = False
        self._segments.extend(result.new_segments)
        self._segments[-1].size = result.active_size
        # `interval`: written to the OS is enough to acknowledge (survives a process crash).
        self._written = self._durable = upto
        if sync:
            self._synced_upto = upto
        # The next flush first: the I/O thread writes and fsyncs while this pass sends replies.
        self._kick()
        self._release_waiters()
        if self.on_durable is not None:
            self.on_durable(upto)
        if result.new_segments and self.auto_compact:
            self.maybe_compact()
        elif self._warm_cleaner and result.active_size >= self.segment_bytes // 2:
            # Start the cleaner process half a segment before its first job: spawning costs
            # a few hundred ms of CPU that should not land on the first compaction.
            self._warm_cleaner = False
            self._compaction_process()

    def _flush_failed(self, exc: Exception) -> None:
        self._flushing = False
        self._fail(exc)
        self._notify_idle()

    def _notify_idle(self) -> None:
        idle, self._idle = self._idle, []
        for fut in idle:
            if not fut.done():
                fut.set_result(None)

    def _io_flush(self, ops: list[bytes | int], sync: bool) -> _FlushResult:
        """On the I/O thread: write the ops in order, rolling segments; fsync if asked."""
        result = _FlushResult(active_size=self._segments[-1].size)
        run: list[bytes] = []
        for op in ops:
            if isinstance(op, bytes):
                run.append(op)
                continue
            self._write_all(run, result)
            run = []
            self._timed_fsync()  # the old segment is complete and durable before the roll
            os.close(self._fd)
            self._fd = self._create_segment(op)
            result.new_segments.append(_Segment(op, 0))
            result.active_size = 0
        self._write_all(run, result)
        if sync:
            self._timed_fsync()
        return result

    def _write_all(self, chunks: list[bytes], result: _FlushResult) -> None:
        """One write(2) for a whole run of appends, not one each. Every blocking call on this
        thread gives the GIL away, and getting it back from a busy event loop can take the whole
        switch interval (5 ms): one write per append made a flush of 100 commits cost
        milliseconds of waiting, and the commits behind it waited too."""
        if not chunks:
            return
        view = memoryview(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        while view:
            n = self._write(self._fd, view)
            view = view[n:]
            result.active_size += n

    def _timed_fsync(self) -> None:
        self.fsync_count += 1
        started = time.perf_counter()
        self._fsync(self._fd)
        if self.on_fsync is not None:
            self.on_fsync(time.perf_counter() - started)

    def _release_waiters(self) -> None:
        waiters = self._waiters
        while waiters and waiters[0][0] <= self._durable:
            fut = heapq.heappop(waiters)[2]
            if not fut.done():
                fut.set_result(None)

    def _fail(self, exc: Exception) -> None:
        self._failed = LogWriteError(f"log write failed: {exc!r}")
        self._failed.__cause__ = exc
        self._pending = []
        for _, _, fut in self._waiters:
            if not fut.done():
                fut.set_exception(self._failed)
        self._waiters = []

    # -- recovery after a failure ----------------------------------------------------------------

    async def recover(self) -> None:
        """Health check: cut the failed batch off the active segment, fsync; then accept appends.

        Raises (and the log stays failed) if the disk is still failing.
        """
        if self._failed is None:
            return
        await asyncio.get_running_loop().run_in_executor(self._io, self._io_recover)
        self._active_logical = self._segments[-1].size
        self._written = self._durable = self._synced_upto = self._next_offset - 1
        self._pending_end = self._next_offset - 1  # offsets of the failed batch stay unused
        self._failed = None

    def _io_recover(self) -> None:
        active = self._segments[-1]
        with contextlib.suppress(OSError):
            os.close(self._fd)
        self._fd = -1
        for b in list_segments(self.directory):
            if b > active.base:  # created by the failed flush
                (self.directory / segment_name(b)).unlink()
        path = self.directory / segment_name(active.base)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.ftruncate(fd, active.size)
            self._fsync(fd)
            fsync_dir(self.directory, self._fsync)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    # -- replay ----------------------------------------------------------------------------------

    def replay(self) -> Iterator[Entry]:
        """Every entry in offset order. Call before appending, and not while compacting."""
        if self._compaction is not None and not self._compaction.done():
            raise RuntimeError("replay while compacting")
        segments = list(self._segments)
        for i, seg in enumerate(segments):
            path = self.directory / segment_name(seg.base)
            data = path.read_bytes()
            reader = EntryReader(data)
            yield from reader
            self._account(reader, path.name)
            if i == len(segments) - 1:
                self._check_tail(data, reader)

    async def replay_batches(self, batch_entries: int = 10_000) -> AsyncIterator[list[Entry]]:
        """Replay without blocking the loop on the disk: each file is read on the I/O thread."""
        loop = asyncio.get_running_loop()
        segments = list(self._segments)
        for i, seg in enumerate(segments):
            path = self.directory / segment_name(seg.base)
            data = await loop.run_in_executor(self._io, path.read_bytes)
            reader = EntryReader(data)
            batch: list[Entry] = []
            for entry in reader:
                batch.append(entry)
                if len(batch) >= batch_entries:
                    yield batch
                    batch = []
                    await asyncio.sleep(0)
            if batch:
                yield batch
            self._account(reader, path.name)
            if i == len(segments) - 1:
                await loop.run_in_executor(self._io, self._check_tail, data, reader)

    async def replay_kv_batches(
        self, batch_entries: int = 10_000
    ) -> AsyncIterator[tuple[list[bytes], list[bytes | None]]]:
        """`replay_batches` as parallel (keys, values) lists (EntryReader.kv_batches): the
        loading path. The next segment is read on the I/O thread while this one is decoded."""
        loop = asyncio.get_running_loop()
        paths = [self.directory / segment_name(seg.base) for seg in self._segments]
        reading = loop.run_in_executor(self._io, paths[0].read_bytes)
        for i, path in enumerate(paths):
            data = await reading
            if i + 1 < len(paths):
                reading = loop.run_in_executor(self._io, paths[i + 1].read_bytes)
            reader = EntryReader(data)
            for batch in reader.kv_batches(batch_entries):
                yield batch
            self._account(reader, path.name)
            if i == len(paths) - 1:
                await loop.run_in_executor(self._io, self._check_tail, data, reader)

    def _account(self, reader: EntryReader, name: str) -> None:
        self.load_report.entries += reader.entries_read
        if reader.tail_bytes and name != segment_name(self._segments[-1].base):
            # an inactive segment is fsynced before the roll: invalid bytes at its end are damage
            self.load_report.damages.append((name, Damage(reader.valid_end, reader.tail_bytes)))
        self.load_report.damages.extend((name, d) for d in reader.damages)

    # -- compaction ------------------------------------------------------------------------------

    def dirty_ratio(self) -> float:
        inactive = self._segments[:-1]
        dirty = sum(s.size for s in inactive if s.base >= self._clean_end)
        total = sum(s.size for s in inactive)
        return dirty / total if total else 0.0

    def maybe_compact(self) -> None:
        """Start a background compaction if the dirty ratio calls for one (Kafka's cleaner)."""
        if self._compaction is not None and not self._compaction.done():
            return
        if self._failed is None and self.dirty_ratio() >= self.min_cleanable_dirty_ratio:
            self._compaction = asyncio.get_running_loop().create_task(self._compact_logged())

    async def _compact_logged(self) -> CompactionStats | None:
        try:
            return await self._compact()
        except Exception as exc:  # kept for the runtime to report; the log itself is repaired
            self.compaction_error = exc
            return None

    async def wait_compaction(self) -> None:
        """Wait for a background compaction (if one runs) to finish; its errors are not raised."""
        if self._compaction is not None:
            with contextlib.suppress(Exception):
                await self._compaction

    async def compact(self, *, force: bool = False) -> CompactionStats | None:
        """Compact now if the dirty ratio calls for it (or `force`); raises if compaction fails."""
        if self._compaction is not None and not self._compaction.done():
            await self._compaction
        if not force and self.dirty_ratio() < self.min_cleanable_dirty_ratio:
            return None
        self._compaction = asyncio.get_running_loop().create_task(self._compact())
        return await self._compaction

    async def _compact(self) -> CompactionStats | None:
        inactive = list(self._segments[:-1])
        if not inactive:
            return None
        bases = [s.base for s in inactive]
        end = self._segments[len(inactive)].base
        loop = asyncio.get_running_loop()
        run = functools.partial(
            compact_segments, self.directory, bases, end, self._clock_ms(), self.delete_retention_ms
        )
        executor: Executor = self._cleaner
        small = sum(s.size for s in inactive) < PROCESS_COMPACTION_MIN_BYTES
        if small or self._compaction_step is not None or self._fsync is not os.fsync:
            step = self._compaction_step or no_step
            run = functools.partial(run, fsync=self._fsync, step=step)
        else:
            executor = self._compaction_process()
        try:
            size, stats = await loop.run_in_executor(executor, run)
        except Exception as exc:
            if isinstance(exc, BrokenProcessPool) and executor is self._cleaner_process:
                # The worker died (the OOM killer, a signal): the pool is unusable for good, so
                # the next compaction starts a fresh one instead of failing the same way forever.
                self._cleaner_process.shutdown(wait=False)
                self._cleaner_process = None
            # Finish or roll back the swap (whichever side of its commit point we stopped on)
            # and re-read the inactive segments, so replay and the next compaction see the disk.
            fresh = await loop.run_in_executor(self._cleaner, self._repair_inactive, end)
            self._segments[: len(inactive)] = fresh
            raise
        self.reclaimed_bytes += max(sum(s.size for s in inactive) - size, 0)
        self._segments[: len(inactive)] = [_Segment(bases[0], size)]
        self._clean_end = end
        await loop.run_in_executor(self._cleaner, self._write_checkpoint)
        self.compactions += 1
        return stats

    def _compaction_process(self) -> Executor:
        """One long-lived worker process (spawned lazily, not forked: the server has threads)."""
        if self._cleaner_process is None:
            self._cleaner_process = _spawn_cleaner_process()
        return self._cleaner_process

    def _repair_inactive(self, end: int) -> list[_Segment]:
        recover_directory(self.directory, fsync=self._fsync)
        return [
            _Segment(b, (self.directory / segment_name(b)).stat().st_size)
            for b in list_segments(self.directory)
            if b < end
        ]

    def _write_checkpoint(self) -> None:
        tmp = self.directory / (CHECKPOINT + ".tmp")
        tmp.write_text(f"{self._clean_end}\n")
        os.replace(tmp, self.directory / CHECKPOINT)

    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    # -- closing ---------------------------------------------------------------------------------

    async def close(self) -> None:
        """Flush what is pending (fsync), wait for a running compaction, release the files."""
        if self._closed:
            return
        self._closed = True
        self._sync_requested = True
        if self._compaction is not None:
            with contextlib.suppress(Exception):
                await self._compaction
        if self._loop is not None:
            idle = self._loop.create_future()
            self._idle.append(idle)
            if not self._flushing:  # else the running flush's completion kicks the last one
                self._kick()
            await idle
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        self._io.shutdown(wait=True)
        self._cleaner.shutdown(wait=True)
        if self._cleaner_process is not None:
            self._cleaner_process.shutdown(wait=True)
            self._cleaner_process = None

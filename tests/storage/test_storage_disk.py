"""DiskLog: reopen, torn tails, damage, group commit, fault injection, interval policy, rolling."""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import threading
import time
from pathlib import Path

import pytest

from storage.compaction import list_segments, segment_name
from storage.disk import DiskLog, parse_policy
from storage.entry import Entry, encode_entry
from storage.log import LogUnavailableError, LogWriteError


def kv(i: int, keys: int = 1000) -> tuple[bytes, bytes | None]:
    return f"k{i % keys}".encode(), f"v{i}".encode()


def state(entries: list[Entry]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for e in entries:
        if e.value is None:
            out.pop(e.key, None)
        else:
            out[e.key] = e.value
    return out


async def reopen(path: Path, **options: object) -> tuple[DiskLog, list[Entry]]:
    log = await DiskLog.open(path, **options)
    return log, list(log.replay())


async def test_append_durable_and_reopen(tmp_path: Path) -> None:
    log = await DiskLog.open(tmp_path)
    offsets = [await log.append_durable([kv(i)]) for i in range(5)]
    assert offsets == [0, 1, 2, 3, 4]
    assert await log.append_durable([kv(5), kv(6)]) == 6
    await log.close()
    log, entries = await reopen(tmp_path)
    assert [e.offset for e in entries] == list(range(7))
    assert entries[6].key == b"k6"
    assert log.append([kv(7)]) == 7
    await log.close()


async def test_group_commit_shares_fsyncs(tmp_path: Path) -> None:
    calls = 0

    def counting_fsync(fd: int) -> None:
        nonlocal calls
        calls += 1
        os.fsync(fd)

    log = await DiskLog.open(tmp_path, fsync=counting_fsync)
    calls = 0
    await asyncio.gather(*(log.append_durable([kv(i)]) for i in range(500)))
    assert calls <= 5, calls  # 500 durable appends, a handful of fsyncs
    await log.close()
    _, entries = await reopen(tmp_path)
    assert len(entries) == 500


async def test_fsyncs_start_the_spacing_apart_while_appends_overlap_them(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    starts: list[float] = []
    log: DiskLog | None = None

    def fsync(fd: int) -> None:
        # When this flush started as the log timed it: the moment it handed the flush to its I/O
        # thread, which is what the spacing is kept from. This call comes a thread wake-up later,
        # and a loaded machine (the suite's other worker) stretches that by tens of ms either
        # way: its own clock would measure the machine, not the spacing.
        starts.append(log._last_sync_start if log is not None else 0.0)
        os.fsync(fd)
        if log is not None and len(starts) < 6:  # another writer's append, while this flush is out
            loop.call_soon_threadsafe(log.append, [kv(len(starts))])

    spacing = 0.05
    log = await DiskLog.open(tmp_path, fsync=fsync, sync_spacing_s=spacing)
    starts.clear()
    await log.append_durable([kv(0)])
    deadline = loop.time() + 10
    while log.durable_offset < 5 and loop.time() < deadline:  # the chain: 6 flushes, 6 records
        await asyncio.sleep(0.01)
    assert log.durable_offset == 5 and len(starts) == 6
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    # uvloop's timers are whole milliseconds: one can fire up to ~1 ms before the float time
    assert all(g >= spacing - 0.003 for g in gaps), gaps
    await log.close()


async def test_a_lone_writer_and_close_never_wait_for_the_spacing(tmp_path: Path) -> None:
    fsync_started = threading.Event()
    slow = [False]

    def fsync(fd: int) -> None:
        fsync_started.set()
        if slow[0]:
            time.sleep(0.2)
        os.fsync(fd)

    log = await DiskLog.open(tmp_path, fsync=fsync, sync_spacing_s=3600.0)
    # A writer that waits for each append: its fsyncs start at once, though the spacing is an
    # hour and each append carries two records.
    for i in range(0, 6, 2):
        await asyncio.wait_for(log.append_durable([kv(i), kv(i + 1)]), 10)
    slow[0] = True
    fsync_started.clear()
    first = log.append([kv(6)])
    durable = asyncio.ensure_future(log.wait_durable(first))
    assert await asyncio.to_thread(fsync_started.wait, 10)
    log.append([kv(7)])  # while that flush is out: the next fsync would wait an hour...
    await asyncio.wait_for(durable, 10)
    await asyncio.wait_for(log.close(), 10)  # ... but closing flushes at once
    _, entries = await reopen(tmp_path)
    assert [e.offset for e in entries] == list(range(8))


async def test_segments_roll_by_size(tmp_path: Path) -> None:
    log = await DiskLog.open(tmp_path, segment_bytes=1000, auto_compact=False)
    for i in range(200):
        await log.append_durable([kv(i)])
    await log.close()
    bases = list_segments(tmp_path)
    assert len(bases) > 5
    for b in bases[:-1]:
        assert (tmp_path / segment_name(b)).stat().st_size < 1000 + 100
    _, entries = await reopen(tmp_path)
    assert [e.offset for e in entries] == list(range(200))


async def test_torn_tail_at_every_byte_offset_is_truncated(tmp_path: Path) -> None:
    log = await DiskLog.open(tmp_path / "src")
    for i in range(20):
        await log.append_durable([kv(i)])
    await log.close()
    data = (tmp_path / "src" / segment_name(0)).read_bytes()
    sizes = [len(encode_entry(0, 0, *kv(i))) for i in range(20)]
    keep_from = sum(sizes[:17])
    for cut in range(keep_from, len(data) + 1):
        d = tmp_path / f"cut{cut}"
        d.mkdir()
        (d / segment_name(0)).write_bytes(data[:cut])
        log, entries = await reopen(d)
        whole = 17 + sum(1 for j in range(17, 20) if sum(sizes[: j + 1]) <= cut)
        assert [e.offset for e in entries] == list(range(whole)), cut
        assert log.load_report.truncated_tail_bytes == cut - sum(sizes[:whole])
        assert log.load_report.damages == []
        # the tail is cut off the file itself, not only skipped by the reader
        assert (d / segment_name(0)).stat().st_size == sum(sizes[:whole]), cut
        await log.close()
        # a second start-up, with nothing written in between, is clean and sees the same state
        log, again = await reopen(d)
        assert (log.load_report.truncated_tail_bytes, log.load_report.damages) == (0, []), cut
        assert [(e.offset, e.key, e.value) for e in again] == [
            (e.offset, e.key, e.value) for e in entries
        ], cut
        # the log continues after the kept entries, and a third reopen sees no tail or damage
        assert await log.append_durable([kv(99)]) == whole
        await log.close()
        log, entries = await reopen(d)
        assert [e.offset for e in entries] == list(range(whole + 1)), cut
        assert state(entries) == state(again) | {b"k99": b"v99"}, cut
        assert (log.load_report.truncated_tail_bytes, log.load_report.damages) == (0, []), cut
        await log.close()


async def test_bit_flips_in_the_middle_are_reported_and_skipped(tmp_path: Path) -> None:
    log = await DiskLog.open(tmp_path, segment_bytes=2000, auto_compact=False)
    for i in range(100):
        await log.append_durable([kv(i)])
    await log.close()
    first = tmp_path / segment_name(0)
    data = bytearray(first.read_bytes())
    sizes = [len(encode_entry(0, 0, *kv(i))) for i in range(100)]
    at10, at20 = sum(sizes[:10]), sum(sizes[:20])
    data[at10 + 4] ^= 0x10  # entry 10: its format version byte
    data[at20 + 40] ^= 0x01  # entry 20: its key
    first.write_bytes(bytes(data))
    log, entries = await reopen(tmp_path)
    offsets = [e.offset for e in entries]
    assert offsets == [i for i in range(100) if i not in (10, 20)]
    report = log.load_report
    assert [(name, d.position) for name, d in report.damages] == [
        (first.name, at10),
        (first.name, at20),
    ]
    assert report.damaged_bytes == sizes[10] + sizes[20]
    assert report.entries == 98
    await log.close()


class FlakyDisk:
    """Injectable write/fsync: fail on demand, with ENOSPC after a short write if asked."""

    def __init__(self) -> None:
        self.fail_fsync: OSError | None = None
        self.fail_write: OSError | None = None
        self.short_write = False
        self.fsyncs = 0

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.fail_write is not None:
            if self.short_write:
                self.short_write = False
                return os.write(fd, data[: len(data) // 2])
            raise self.fail_write
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        self.fsyncs += 1
        if self.fail_fsync is not None:
            raise self.fail_fsync
        os.fsync(fd)


async def test_a_flush_writes_each_segment_once_however_many_appends_it_carries(
    tmp_path: Path,
) -> None:
    """Every write(2) on the I/O thread costs a GIL round trip with the busy event loop, so the
    appends that share a flush go out in one write per segment, not one each."""
    writes: list[tuple[int, int]] = []

    def write(fd: int, data: bytes | memoryview) -> int:
        writes.append((fd, len(data)))
        return os.write(fd, data)

    log = await DiskLog.open(tmp_path, segment_bytes=600, auto_compact=False, write=write)
    await log.append_durable([kv(0)])
    writes.clear()
    last = 0
    for i in range(1, 61):  # no await in between: all of them wait for the same flush
        last = log.append([kv(i)])
    await log.wait_durable(last)
    segments = list_segments(tmp_path)
    assert len(segments) >= 3  # the batch rolled at least twice
    assert len(writes) == len(segments)  # one write for each segment the batch touched
    assert sum(n for _, n in writes) == sum(len(encode_entry(i, 0, *kv(i))) for i in range(1, 61))
    await log.close()
    _, entries = await reopen(tmp_path)
    assert [e.offset for e in entries] == list(range(61))


async def test_on_durable_hears_of_a_flush_before_any_waiter_wakes(tmp_path: Path) -> None:
    """The runtime releases held replies from `on_durable`, in the pass of the loop that takes
    the flush's completion; a waiter's task wakes a pass later."""
    log = await DiskLog.open(tmp_path)
    woke: list[int] = []
    heard: list[tuple[int, list[int]]] = []
    log.on_durable = lambda durable: heard.append((durable, list(woke)))

    async def waiter(offset: int) -> None:
        await log.wait_durable(offset)
        woke.append(offset)

    offsets = [log.append([kv(i)]) for i in range(3)]
    await asyncio.gather(*(waiter(o) for o in offsets))
    assert heard == [(2, [])]  # one flush for all three, heard before any waiter ran
    assert sorted(woke) == offsets
    await log.close()


@pytest.mark.parametrize("fault", ["fsync_eio", "write_enospc", "short_write_then_enospc"])
async def test_injected_fault_fails_waiters_refuses_appends_keeps_data(
    tmp_path: Path, fault: str
) -> None:
    disk = FlakyDisk()
    log = await DiskLog.open(tmp_path, fsync=disk.fsync, write=disk.write)
    for i in range(10):
        await log.append_durable([kv(i)])
    size_before = (tmp_path / segment_name(0)).stat().st_size
    if fault == "fsync_eio":
        disk.fail_fsync = OSError(errno.EIO, "I/O error")
    else:
        disk.fail_write = OSError(errno.ENOSPC, "No space left on device")
        disk.short_write = fault == "short_write_then_enospc"
    results = await asyncio.gather(
        *(log.append_durable([kv(100 + i)]) for i in range(20)), return_exceptions=True
    )
    assert all(isinstance(r, LogWriteError) for r in results), results
    assert not log.healthy
    with pytest.raises(LogUnavailableError):
        log.append([kv(1)])
    # the disk is still bad: the health check fails and the log stays failed
    disk.fail_fsync = OSError(errno.EIO, "still broken")
    with pytest.raises(OSError):
        await log.recover()
    assert not log.healthy
    # the disk is healthy again: recover() cuts the failed batch off and appends work
    disk.fail_fsync = disk.fail_write = None
    await log.recover()
    assert log.healthy
    assert (tmp_path / segment_name(0)).stat().st_size == size_before
    offset = await log.append_durable([kv(200)])
    await log.close()
    log, entries = await reopen(tmp_path)
    assert [e.offset for e in entries] == [*range(10), offset]
    assert log.load_report.damages == []
    await log.close()


async def test_failure_without_recover_leaves_existing_data_loadable(tmp_path: Path) -> None:
    disk = FlakyDisk()
    log = await DiskLog.open(tmp_path, fsync=disk.fsync, write=disk.write)
    for i in range(10):
        await log.append_durable([kv(i)])
    disk.fail_write = OSError(errno.ENOSPC, "No space left on device")
    disk.short_write = True
    with pytest.raises(LogWriteError):
        await log.append_durable([kv(50)])
    await log.close()  # "crash" with half an entry on disk
    log, entries = await reopen(tmp_path)
    assert [e.offset for e in entries] == list(range(10))
    assert log.load_report.truncated_tail_bytes > 0
    await log.close()


async def test_interval_policy_acknowledges_after_write_and_syncs_later(tmp_path: Path) -> None:
    disk = FlakyDisk()
    log = await DiskLog.open(tmp_path, policy="interval:20", fsync=disk.fsync)
    before = disk.fsyncs
    await asyncio.gather(*(log.append_durable([kv(i)]) for i in range(50)))
    assert (tmp_path / segment_name(0)).stat().st_size > 0  # written before acknowledged
    deadline = asyncio.get_running_loop().time() + 5
    while disk.fsyncs == before:
        assert asyncio.get_running_loop().time() < deadline, "no fsync within the interval"
        await asyncio.sleep(0.005)
    await log.close()
    _, entries = await reopen(tmp_path)
    assert len(entries) == 50


def test_policy_parsing() -> None:
    assert parse_policy("always") is None
    assert parse_policy("interval:250") == 250
    for bad in ("sometimes", "interval:", "interval:0", "interval:-5"):
        with pytest.raises(ValueError):
            parse_policy(bad)

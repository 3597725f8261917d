"""Compaction: bounded size, same state after, crash at every step, tombstones, property."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage import compaction
from storage.compaction import compact_segments, list_segments
from storage.disk import CLEANER_NICENESS, PROCESS_COMPACTION_MIN_BYTES, DiskLog
from storage.entry import Entry
from storage.log import MemoryLog

DAY_MS = 86_400_000


def state(entries: list[Entry]) -> dict[bytes, bytes]:
    out: dict[bytes, bytes] = {}
    for e in entries:
        if e.value is None:
            out.pop(e.key, None)
        else:
            out[e.key] = e.value
    return out


class Clock:
    def __init__(self) -> None:
        self.ms = 10 * DAY_MS

    def __call__(self) -> int:
        return self.ms


async def fill(path: Path, n: int, keys: int, **options: object) -> dict[bytes, bytes]:
    log = await DiskLog.open(path, **options)
    for start in range(0, n, 50):
        await log.append_durable(
            [(f"k{i % keys}".encode(), f"v{i}".encode()) for i in range(start, start + 50)]
        )
    await log.close()
    return {f"k{i % keys}".encode(): f"v{i}".encode() for i in range(max(0, n - keys), n)}


async def test_long_run_over_few_keys_stays_bounded_and_keeps_state(tmp_path: Path) -> None:
    log = await DiskLog.open(tmp_path, segment_bytes=4096)
    expected: dict[bytes, bytes] = {}
    peak = 0
    for i in range(0, 40_000, 100):
        batch = [(f"k{j % 20}".encode(), f"v{j}".encode()) for j in range(i, i + 100)]
        expected.update(batch)  # type: ignore[arg-type]
        await log.append_durable(batch)
        peak = max(peak, log.size_bytes())
        # The rule, not the cleaner's speed: given its turn, auto-compaction bounds the log (how
        # far it falls behind a writer at full speed depends on the machine's load).
        await log.wait_compaction()
    await log.compact()
    assert log.compactions > 10
    before = state(list(log.replay()))
    await log.close()
    on_disk = sum(p.stat().st_size for p in tmp_path.glob("*.log"))
    # a batch (~4.5 KB) rolls a segment each time: O(segments), against ~1.7 MB for the 40,000
    # entries written
    assert peak < 16 * 4096, peak
    assert on_disk < 6 * 4096
    reopened = await DiskLog.open(tmp_path)
    assert state(list(reopened.replay())) == before == expected
    await reopened.close()


async def test_replay_after_compaction_equals_before(tmp_path: Path) -> None:
    clock = Clock()
    log = await DiskLog.open(tmp_path, segment_bytes=2048, auto_compact=False, clock_ms=clock)
    for i in range(3000):
        key = f"k{i % 97}".encode()
        value = None if i % 11 == 0 else f"v{i}".encode()
        log.append([(key, value)])
    await log.append_durable([(b"last", b"x")])
    full = list(log.replay())
    stats = await log.compact(force=True)
    assert stats is not None and stats.entries_out < stats.entries_in
    after = list(log.replay())
    assert state(after) == state(full)
    assert [e.offset for e in after] == sorted(e.offset for e in after)
    # tombstones are kept inside the retention window ...
    assert any(e.value is None for e in after)
    await log.close()
    # ... and dropped after it, with what they deleted staying deleted
    clock.ms += DAY_MS + 1
    log = await DiskLog.open(tmp_path, segment_bytes=2048, auto_compact=False, clock_ms=clock)
    log.append([(b"roll", b"y")] * 200)  # roll so the old active segment becomes cleanable
    await log.append_durable([(b"roll", b"z")])
    await log.compact(force=True)
    final = list(log.replay())
    assert not any(e.value is None for e in final if e.offset < 3000)
    assert {k: v for k, v in state(final).items() if k not in (b"roll",)} == state(full)
    await log.close()


class Crash(BaseException):
    pass


STEPS = [
    "write", "fsync", "rename_swap", "fsync_dir_swap", "delete_old", "deleted_one",
    "rename_final", "fsync_dir_final",
]  # fmt: skip


@pytest.mark.parametrize("crash_at", [*STEPS, "deleted_one#3", None])
async def test_crash_at_every_compaction_step(tmp_path: Path, crash_at: str | None) -> None:
    await fill(tmp_path, 3000, 50, segment_bytes=4096, auto_compact=False)
    bases = list_segments(tmp_path)
    assert len(bases) > 4
    before = await replay_of(tmp_path)
    seen: list[str] = []

    def step(name: str) -> None:
        seen.append(name)
        label = name if seen.count(name) == 1 else f"{name}#{seen.count(name)}"
        if label == crash_at:
            raise Crash(label)

    with contextlib.suppress(Crash):
        compact_segments(tmp_path, bases[:-1], bases[-1], 0, DAY_MS, step=step)
    if crash_at is not None:
        assert crash_at in seen or crash_at.split("#")[0] in seen
    log = await DiskLog.open(tmp_path, segment_bytes=4096)
    after = list(log.replay())
    assert state(after) == state(before)
    assert not list(tmp_path.glob("*.cleaned")) and not list(tmp_path.glob("*.swap"))
    crashed_after_commit = crash_at is None or STEPS.index(crash_at.split("#")[0]) >= 3
    assert (len(list_segments(tmp_path)) == 2) == crashed_after_commit
    await log.append_durable([(b"after", b"crash")])
    await log.close()


async def replay_of(path: Path) -> list[Entry]:
    log = await DiskLog.open(path, auto_compact=False)
    entries = list(log.replay())
    await log.close()
    return entries


async def test_failed_compaction_repairs_itself(tmp_path: Path) -> None:
    await fill(tmp_path, 2000, 30, segment_bytes=2048, auto_compact=False)
    log = await DiskLog.open(tmp_path, segment_bytes=2048, auto_compact=False)
    before = state(list(log.replay()))

    for failing in ("fsync", "delete_old"):

        def step(name: str, failing: str = failing) -> None:
            if name == failing:
                raise OSError("injected")

        log._compaction_step = step
        with pytest.raises(OSError):
            await log.compact(force=True)
        assert state(list(log.replay())) == before
    log._compaction_step = None
    await log.compact(force=True)
    assert state(list(log.replay())) == before
    await log.close()


def test_leftovers_are_resolved(tmp_path: Path) -> None:
    (tmp_path / "00000000000000000000.00000000000000000010.cleaned").write_bytes(b"junk")
    assert compaction.recover_directory(tmp_path) == [
        "00000000000000000000.00000000000000000010.cleaned"
    ]
    assert list(tmp_path.iterdir()) == []


ops = st.lists(
    st.tuples(
        st.sampled_from(["append", "append", "append", "compact", "reopen", "age"]),
        st.integers(0, 7),
        st.none() | st.binary(min_size=0, max_size=30),
    ),
    max_size=60,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops)
def test_property_replay_is_last_value_per_key(
    tmp_path_factory: pytest.TempPathFactory, steps: list
) -> None:  # type: ignore[type-arg]
    path = tmp_path_factory.mktemp("prop")

    async def run() -> None:
        clock = Clock()
        options: dict[str, object] = {
            "segment_bytes": 300,
            "clock_ms": clock,
            "delete_retention_ms": 1000,
        }
        log = await DiskLog.open(path, **options)
        memory = MemoryLog(clock_ms=clock.ms, delete_retention_ms=1000)
        expected: dict[bytes, bytes] = {}
        for op, k, v in steps:
            key = f"key{k}".encode()
            if op == "append":
                await log.append_durable([(key, v)])
                memory.clock_ms = clock.ms
                await memory.append_durable([(key, v)])
                if v is None:
                    expected.pop(key, None)
                else:
                    expected[key] = v
            elif op == "compact":
                await log.compact(force=True)
                await memory.compact(force=True)
            elif op == "age":
                clock.ms += 2000
            else:
                await log.close()
                log = await DiskLog.open(path, **options)
            await log.wait_compaction()  # background compaction may run after any append
            assert state(list(log.replay())) == expected
            assert state(list(memory.replay())) == expected
        await log.close()

    asyncio.run(run())


async def test_large_compaction_runs_in_a_worker_process(tmp_path: Path) -> None:
    """Over PROCESS_COMPACTION_MIN_BYTES of inactive segments, compaction leaves the server's
    process (it would hold the GIL the event loop needs) and gives the same result."""
    log = await DiskLog.open(tmp_path, segment_bytes=256 * 1024, auto_compact=False)
    expected: dict[bytes, bytes] = {}
    value = b"x" * 200
    for i in range(0, 8_000, 200):
        batch = [(f"k{j % 500}".encode(), value + str(j).encode()) for j in range(i, i + 200)]
        expected.update(batch)
        await log.append_durable(batch)
    inactive = log.size_bytes() - 256 * 1024
    assert inactive >= PROCESS_COMPACTION_MIN_BYTES
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # a server pinned to one CPU spawns the worker
    try:
        stats = await log.compact(force=True)
    finally:
        os.sched_setaffinity(0, allowed)
    assert stats is not None and stats.entries_out <= 500 + 256 * 1024 // 200
    assert log._cleaner_process is not None  # it really went to the worker process
    # ... which runs niced below the server, on any CPU it is allowed (not the server's pin)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    assert log._cleaner_process.submit(os.nice, 0).result() == min(own + CLEANER_NICENESS, 19)
    assert log._cleaner_process.submit(os.sched_getaffinity, 0).result() >= allowed
    assert state(list(log.replay())) == expected
    await log.close()
    reopened = await DiskLog.open(tmp_path)
    assert state(list(reopened.replay())) == expected
    await reopened.close()


_SPAWN_PROBE = """
import os, sys
from storage.disk import _spawn_cleaner_process

def children():
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(stat[1]) == os.getpid():
            out[int(pid)] = int(stat[16])  # the nice value
    return out

if __name__ == "__main__":
    before = children()
    pool = _spawn_cleaner_process()
    print(os.getpriority(os.PRIO_PROCESS, 0))
    print(sorted(n for pid, n in children().items() if pid not in before))
    pool.shutdown()
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="niceness is per thread only on Linux; reads /proc"
)
def test_every_process_the_cleaner_starts_is_born_niced(tmp_path: Path) -> None:
    """The worker *and* multiprocessing's resource tracker: a fresh interpreter starts both, and
    neither may run its start-up at the server's priority (it shared the server's core)."""
    probe = tmp_path / "probe.py"
    probe.write_text(_SPAWN_PROBE)
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, str(probe)],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split("\n")
    own = int(out[0])
    started = ast.literal_eval(out[1])
    assert len(started) == 2, started  # the worker and the resource tracker
    assert started == [min(own + CLEANER_NICENESS, 19)] * 2


async def test_a_dead_worker_is_replaced_by_the_next_compaction(tmp_path: Path) -> None:
    """A worker killed (the OOM killer, a signal) fails that compaction, not every later one."""
    log = await DiskLog.open(tmp_path, segment_bytes=256 * 1024, auto_compact=False)
    value = b"x" * 200
    expected: dict[bytes, bytes] = {}

    async def fill(start: int) -> None:
        for i in range(start, start + 8_000, 200):
            batch = [(f"k{j % 500}".encode(), value + str(j).encode()) for j in range(i, i + 200)]
            expected.update(batch)
            await log.append_durable(batch)

    await fill(0)
    worker = log._compaction_process().submit(os.getpid).result()
    os.kill(worker, signal.SIGKILL)
    with pytest.raises(Exception, match="terminated abruptly"):
        await log.compact(force=True)
    assert state(list(log.replay())) == expected  # the failed swap was repaired
    await fill(8_000)
    stats = await log.compact(force=True)
    assert stats is not None
    assert log._cleaner_process is not None
    assert log._cleaner_process.submit(os.getpid).result() != worker
    assert state(list(log.replay())) == expected
    await log.close()

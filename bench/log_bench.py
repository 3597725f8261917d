"""Storage benchmarks (issue 3) below the server: DiskLog group commit, loading, compaction.

`make bench` runs them through bench/scenario_storage.py (which uses `write_recovery_log` and
`compacted_size` from here, and measures commits over the Kafka protocol instead of `_throughput`).
`run(quick) -> list[dict]`: one row per measurement ({"metric", "value", "unit", "goal", ...}).
Standalone: `python -m bench.log_bench [--quick]`. Files go to a temporary directory on the same
disk as the working directory (set GROUPCOORD_BENCH_DIR to choose), removed afterwards.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.record_codec import encode_record
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
)
from coordinator.core.topics import TopicCatalog
from coordinator.serve.journal import DiskJournal
from storage.compaction import segment_name
from storage.disk import DiskLog
from storage.entry import encode_entry

Row = dict[str, Any]


def _offset_kv(group: int, partition: int, offset: int) -> tuple[bytes, bytes | None]:
    return encode_record(
        Record(
            OffsetCommitKey(f"group-{group}", f"topic-{group % 50}", partition),
            OffsetCommitValue(offset, 3, "", 1_700_000_000_000 + offset, None),
        )
    )


def _group_kv(group: int) -> tuple[bytes, bytes | None]:
    members = tuple(
        MemberMetadata(f"consumer-{m}-uuid", None, f"client-{m}", "/10.0.0.1", 300_000, 45_000,
                       b"\x00\x01" * 20, b"\x00\x02" * 30)
        for m in range(3)
    )  # fmt: skip
    value = GroupMetadataValue("consumer", 7, "range", members[0].member_id, 1, members)
    return encode_record(Record(GroupMetadataKey(f"group-{group}"), value))


async def _throughput(path: Path, appenders: int, partitions: int, seconds: float) -> list[Row]:
    log = await DiskLog.open(path, segment_bytes=64 * 1024 * 1024)
    latencies: list[float] = []
    stop = time.perf_counter() + seconds
    fsyncs_before = log.fsync_count

    async def committer(i: int) -> None:
        offset = 0
        while time.perf_counter() < stop:
            batch = [_offset_kv(i, p, offset) for p in range(partitions)]
            t0 = time.perf_counter()
            await log.append_durable(batch)
            latencies.append(time.perf_counter() - t0)
            offset += 1

    t0 = time.perf_counter()
    await asyncio.gather(*(committer(i) for i in range(appenders)))
    elapsed = time.perf_counter() - t0
    fsyncs = log.fsync_count - fsyncs_before
    await log.close()
    latencies.sort()
    records = len(latencies) * partitions
    p99_ms = latencies[int(len(latencies) * 0.99)] * 1000 if latencies else float("nan")
    tag = f"{appenders} appenders x {partitions} partitions, fsync=always"
    return [
        {"metric": "append_records_per_s", "value": records / elapsed, "unit": "records/s",
         "goal": ">= 20000", "scenario": tag},
        {"metric": "append_p99_ms", "value": p99_ms, "unit": "ms", "scenario": tag},
        {"metric": "records_per_fsync", "value": records / max(fsyncs, 1), "unit": "records",
         "scenario": tag},
    ]  # fmt: skip


def write_recovery_log(path: Path, offsets: int, groups: int) -> int:
    """Write a compacted-looking log directly (distinct keys), 64 MiB segments: `groups` group
    records, then `offsets` offset records over `offsets // 100` groups, 100 partitions each."""
    path.mkdir(parents=True, exist_ok=True)
    base, size, n = 0, 0, 0
    out = open(path / segment_name(0), "wb")  # noqa: SIM115 - rolled below
    ts = 1_700_000_000_000
    for i in range(offsets + groups):
        if i < groups:
            key, value = _group_kv(i)
        else:
            j = i - groups
            key, value = _offset_kv(j // 100, j % 100, j)
        data = encode_entry(i, ts, key, value)
        if size >= 64 * 1024 * 1024:
            out.close()
            base, size = i, 0
            out = open(path / segment_name(base), "wb")  # noqa: SIM115
        out.write(data)
        size += len(data)
        n += 1
    out.close()
    return n


async def _recovery(path: Path, offsets: int, groups: int) -> list[Row]:
    total = write_recovery_log(path, offsets, groups)
    size = sum(p.stat().st_size for p in path.glob("*.log"))
    t0 = time.perf_counter()
    log = await DiskLog.open(path, auto_compact=False)
    core = GroupCoordinator(CoordinatorConfig(), TopicCatalog(()), lambda prefix: prefix)
    loaded = await DiskJournal(log).load(core)
    elapsed = time.perf_counter() - t0
    await log.close()
    assert loaded == total, (loaded, total)

    t1 = time.perf_counter()
    log = await DiskLog.open(path, auto_compact=False)
    frames_only = sum(1 for _ in log.replay())
    frame_elapsed = time.perf_counter() - t1
    await log.close()
    tag = f"{offsets:,} offset + {groups:,} group records, {size / 1e6:.0f} MB"
    return [
        {"metric": "recovery_records_per_s", "value": total / elapsed, "unit": "records/s",
         "goal": ">= 500000", "scenario": tag + ", DiskJournal.load into a GroupCoordinator"},
        {"metric": "recovery_seconds", "value": elapsed, "unit": "s", "scenario": tag},
        {"metric": "replay_frames_per_s", "value": frames_only / frame_elapsed,
         "unit": "records/s", "scenario": tag + ", framing + CRC only"},
    ]  # fmt: skip


@dataclass(frozen=True)
class CompactionResult:
    peak_bytes: int
    final_bytes: int
    live_bytes: int  # the last record of every key, framed: what compaction can get down to
    uncompacted_bytes: int
    compactions: int
    seconds: float


async def compacted_size(path: Path, commits: int, keys: int) -> CompactionResult:
    """`commits` offset commits over `keys` keys, 1,000 per append, through a DiskLog with 4 MiB
    segments and background compaction; then one last compaction."""
    log = await DiskLog.open(path, segment_bytes=4 * 1024 * 1024)
    peak = 0
    batch_size = 1000
    t0 = time.perf_counter()
    for start in range(0, commits, batch_size):
        batch = [_offset_kv(k // 100, k % 100, start) for k in
                 ((start + i) % keys for i in range(min(batch_size, commits - start)))]  # fmt: skip
        await log.append_durable(batch)
        peak = max(peak, log.size_bytes())
    await log.compact()
    elapsed = time.perf_counter() - t0
    final = log.size_bytes()
    compactions = log.compactions
    await log.close()
    entry = len(encode_entry(0, 0, *_offset_kv(1, 1, 1)))
    return CompactionResult(peak, final, keys * entry, commits * entry, compactions, elapsed)


async def _compacted_size(path: Path, commits: int, keys: int) -> list[Row]:
    r = await compacted_size(path, commits, keys)
    tag = f"{commits:,} commits on {keys:,} keys, 4 MiB segments, {r.compactions} compactions"
    return [
        {"metric": "log_peak_bytes", "value": r.peak_bytes, "unit": "bytes", "scenario": tag},
        {"metric": "log_final_bytes", "value": r.final_bytes, "unit": "bytes", "scenario": tag},
        {"metric": "log_uncompacted_bytes", "value": r.uncompacted_bytes, "unit": "bytes",
         "scenario": tag},
        {"metric": "commit_records_per_s_batched", "value": commits / r.seconds,
         "unit": "records/s", "scenario": tag + ", 1000-record appends"},
    ]  # fmt: skip


async def _run_all(quick: bool, root: Path) -> list[Row]:
    rows: list[Row] = []
    seconds = 2.0 if quick else 10.0
    rows += await _throughput(root / "tp1", 200, 1, seconds)
    rows += await _throughput(root / "tp50", 200, 50, seconds)
    rows += await _recovery(root / "rec", *((100_000, 1_000) if quick else (1_000_000, 10_000)))
    rows += await _compacted_size(root / "cmp", *((1_000_000, 10_000) if quick else
                                                   (10_000_000, 10_000)))  # fmt: skip
    return rows


def run(quick: bool) -> list[Row]:
    base = os.environ.get("GROUPCOORD_BENCH_DIR", ".")
    root = Path(tempfile.mkdtemp(prefix="groupcoord-logbench-", dir=base))
    try:
        return uvloop.run(_run_all(quick, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    for row in run("--quick" in sys.argv):
        extra = f"  (goal {row['goal']})" if "goal" in row else ""
        print(
            f"{row['metric']:32} {row['value']:>16,.1f} {row['unit']:10} {row['scenario']}{extra}"
        )

"""The history log's cost, and the audit's throughput (issue 7).

`history`: the heartbeat benchmark's closed loop (1,000 members in 100 groups) and the join storm
(1,000 members into one group) against fresh servers with `--history` (the default) and with
`--no-history`, interleaved, best of `rounds`. Target: < 5% loss. Heartbeats write no history at
all (they emit no event), so the heartbeat figure bounds the cost of the writer thread merely
existing; the join storm writes ~2 events per member and measures the sink and the writer.
Loss is computed on hb/s per server core and on server CPU seconds per storm, which other
processes on the machine cannot inflate the way they inflate wall-clock rates.

`audit`: N synthetic events (10 million; --quick: 300,000) written by the real segment writer,
then the whole audit (decode, four Parquet tables, the report) in local mode with 1 and with 2
cores, each in a fresh process (a fresh JVM, not pinned like the load generator). Reports
events/s (job time, without Spark's start-up) and the 2-core speed-up.

    python -m bench --only history,audit --quick
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import loadgen, servers
from bench.__main__ import HB_GROUPS, HB_PER_GROUP, Context, Goal, Metric, register

MODES: tuple[tuple[str, list[str]], ...] = (("off", ["--no-history"]), ("on", []))
STORM_MEMBERS = 1000


def history_entries(server: servers.Server) -> int:
    """How many entries the server's history holds (0 when off): proves the mode was real."""
    from pipeline.segments import find_segments, segment_rows

    data = server.workdir / "data"
    if not (data / "history").is_dir():
        return 0
    return sum(1 for ref in find_segments([data]) for _ in segment_rows(ref))


async def heartbeat_round(ctx: Context, extra: list[str], warmup: float, measure: float) -> float:
    server = servers.start_groupcoord(ctx.server_core, extra)
    try:
        conns = await loadgen.connect_many(servers.HOST, server.port, HB_GROUPS * HB_PER_GROUP)
        try:
            members = await loadgen.form_groups(conns, HB_GROUPS, HB_PER_GROUP, deadline_s=120)
            full = await loadgen.closed_loop(members, warmup, measure, server.cpu_s)
        finally:
            loadgen.close_all(conns)
    finally:
        server.stop()
    if full.errors:
        raise RuntimeError(f"{full.errors} heartbeat errors")
    return full.rate / max(full.server_cpu_s / measure, 1e-9)


async def storm_round(ctx: Context, extra: list[str]) -> tuple[float, float, int]:
    server = servers.start_groupcoord(ctx.server_core, extra)
    try:
        conns = await loadgen.connect_many(servers.HOST, server.port, STORM_MEMBERS)
        try:
            cpu0 = server.cpu_s()
            r = await loadgen.join_storm(conns, "storm", 0.1, deadline_s=120)
            cpu = server.cpu_s() - cpu0
        finally:
            loadgen.close_all(conns)
        await asyncio.sleep(0.5)  # > the writer's flush interval
        entries = await asyncio.to_thread(history_entries, server)
    finally:
        server.stop()
    return r.seconds, cpu, entries


@register(
    "history",
    "history log on vs off: heartbeats (1,000 members) and a 1,000-member join storm",
    [
        Metric("hist_hb_off_per_core", "history off: hb/s per server core", "hb/s"),
        Metric("hist_hb_on_per_core", "history on: hb/s per server core", "hb/s"),
        Metric("hist_hb_loss", "heartbeat throughput loss", "%", Goal("<", 5)),
        Metric("hist_storm_off_cpu_s", "history off: server CPU per join storm", "s"),
        Metric("hist_storm_on_cpu_s", "history on: server CPU per join storm", "s"),
        Metric("hist_storm_loss", "join storm CPU overhead", "%", Goal("<", 5)),
        Metric("hist_storm_off_s", "history off: last join -> leader synced", "s"),
        Metric("hist_storm_on_s", "history on: last join -> leader synced", "s"),
        Metric("hist_storm_entries", "history entries written per storm", "count"),
    ],
    serverless=True,
)
async def history(ctx: Context, server: object) -> dict[str, float]:
    warmup, measure = (0.5, 2.0) if ctx.quick else (2.0, 10.0)
    rounds = 1 if ctx.quick else 3
    per_core: dict[str, float] = {}
    storm_cpu: dict[str, float] = {}
    storm_s: dict[str, float] = {}
    entries = {"on": 0, "off": 0}
    for _ in range(rounds):
        for mode, extra in MODES:  # interleaved: a slow spell of the machine hits both modes
            rate = await heartbeat_round(ctx, extra, warmup, measure)
            per_core[mode] = max(per_core.get(mode, 0.0), rate)
            seconds, cpu, written = await storm_round(ctx, extra)
            storm_cpu[mode] = min(storm_cpu.get(mode, float("inf")), cpu)
            storm_s[mode] = min(storm_s.get(mode, float("inf")), seconds)
            entries[mode] = max(entries[mode], written)
    if entries["off"] or not entries["on"]:
        raise RuntimeError(f"history entries per mode look wrong: {entries}")
    return {
        "hist_hb_off_per_core": per_core["off"],
        "hist_hb_on_per_core": per_core["on"],
        "hist_hb_loss": 100 * (1 - per_core["on"] / per_core["off"]),
        "hist_storm_off_cpu_s": storm_cpu["off"],
        "hist_storm_on_cpu_s": storm_cpu["on"],
        "hist_storm_loss": 100 * (storm_cpu["on"] / storm_cpu["off"] - 1),
        "hist_storm_off_s": storm_s["off"],
        "hist_storm_on_s": storm_s["on"],
        "hist_storm_entries": entries["on"],
    }


# -- the audit's throughput ----------------------------------------------------------------------

FULL_EVENTS, QUICK_EVENTS = 10_000_000, 300_000


def run_worker(history_dir: Path, out: Path, master: str) -> dict[str, float]:
    """One audit in a fresh interpreter (and JVM), on every core of the machine."""
    cmd = [sys.executable, "-m", "bench.scenario_history", str(history_dir), str(out), master]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=3600, check=False, cwd=servers.REPO
    )
    if proc.returncode != 0:
        raise RuntimeError(f"audit worker ({master}) failed:\n{proc.stderr[-3000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@register(
    "audit",
    "rebalance audit over synthetic history (10M events; quick: 300k), local[1] vs local[2]",
    [
        Metric("audit_events", "events audited", "count"),
        Metric("audit_write_s", "writing them (segment writer + codec)", "s"),
        Metric("audit_1core_eps", "local[1]: events/s", "ev/s"),
        Metric("audit_2core_eps", "local[2]: events/s", "ev/s"),
        Metric("audit_speedup", "local[2] / local[1]", "x"),
        Metric("audit_spark_start_s", "Spark start-up (local[2])", "s"),
    ],
    serverless=True,
)
async def audit(ctx: Context, server: object) -> dict[str, float]:
    from pipeline.synthetic import write_synthetic

    events = QUICK_EVENTS if ctx.quick else FULL_EVENTS
    work = Path(tempfile.mkdtemp(prefix="bench-audit-"))
    try:
        t0 = time.monotonic()
        await asyncio.to_thread(write_synthetic, work / "history", events, groups=200)
        write_s = time.monotonic() - t0
        one = await asyncio.to_thread(run_worker, work / "history", work / "out1", "local[1]")
        two = await asyncio.to_thread(run_worker, work / "history", work / "out2", "local[2]")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if one["events"] != events or two["events"] != events:
        raise RuntimeError(f"audited {one['events']} / {two['events']} of {events} events")
    return {
        "audit_events": float(events),
        "audit_write_s": write_s,
        "audit_1core_eps": events / one["seconds"],
        "audit_2core_eps": events / two["seconds"],
        "audit_speedup": one["seconds"] / two["seconds"],
        "audit_spark_start_s": two["start_s"],
    }


def _worker(history_dir: str, out: str, master: str) -> None:
    # The bench pins its own process (and so this child) to the generator's core: undo that.
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, os.sched_getaffinity(1))
    from pipeline.audit import run_audit, spark_session

    t0 = time.monotonic()
    spark = spark_session(master)
    start_s = time.monotonic() - t0
    try:
        summary = run_audit(spark, [history_dir], out)
    finally:
        spark.stop()
    print(json.dumps({"events": summary.events, "seconds": summary.seconds, "start_s": start_s}))


if __name__ == "__main__":
    _worker(*sys.argv[1:4])

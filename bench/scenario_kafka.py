"""groupcoord beside Apache Kafka 4.4's group coordinator (issue 34, item 6; idle CPU: issues 35
and 37): the same load generator against both, in the same run, printed as the table
"groupcoord vs Kafka 4.4" with the ratio groupcoord / Kafka.

Kafka is one KRaft node (broker + controller) from $GROUPCOORD_PEERS/kafka/lib (`make peers`),
formatted and started by the tests' KafkaCluster (tests/support/kafka.py) with the broker's own
JVM options and defaults (bench/servers.py start_kafka). Each comparison gets a fresh groupcoord and
a fresh Kafka, each pinned to the bench's server core (the generator has the other), one after the
other. A JVM compiles its hot paths while it runs, so before every measured pass Kafka gets a
warm-up pass: the same workload once, on other group names (or its own topic), not counted.

`kafka` -- the coordinators:
  - heartbeats: the `heartbeat` scenario's load (1,000 members in 100 groups, one connection
    each; a closed loop, then an open loop at 20,000/s): heartbeats/s, server CPU per heartbeat
    (the closed loop's server CPU / heartbeats), p99s;
  - the `join` scenario's storm: 1,000 classic members into one group;
  - offset commits/s: 200 simple committers (OffsetCommit v7, own connection and group each),
    closed loop, 1 then 50 partitions per commit. Kafka acknowledges a commit once it is in its log
    (page cache; no fsync per write, its durability is replication): the like-for-like groupcoord
    is `--fsync interval:1000`; groupcoord's default `--fsync always` is shown too;
  - RSS: the `rss` scenario (10,000 members in 1,000 groups) as RSS growth per 1,000 members.
    Kafka's heap is committed up front (-Xms1G), so its RSS grows by the heap pages the load
    touches, garbage included: its live heap growth (full GC, `jcmd GC.class_histogram`) per 1,000
    members is shown too;
  - 1,000 KIP-848 members forming (ConsumerGroupHeartbeat; the `rebalance` scenario's consumer
    members and topic of 2,000 partitions, both servers' heartbeat interval 100 ms).
`sidecar_kafka` -- the `sidecar` scenario with Kafka as the upstream: produce/consume through a
  `--state local` sidecar (groupcoord column) vs straight to Kafka (kafka column).
`fleet_kafka` -- the `fleet` scenario's kill -9 failover rounds with Kafka as the upstream (its
  consumer group is what moves a dead member's partitions; Kafka not pinned, the members on the
  server core): issue 37's goals, p50 <= 1.5 s and max <= 3 s, 0 acknowledged commits lost.
`idle` -- ms of CPU per 10 s of servers with no clients, from /proc (all threads), once start-up
  has settled: a standalone groupcoord, a `--state local` sidecar and a fleet member (state on the
  upstream) in front of an idle Kafka; and that Kafka itself for reference.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench import loadgen, servers, wire
from bench import scenario_fleet as fleet
from bench import scenario_rebalance as rebalance
from bench import scenario_sidecar as sidecar
from bench import scenario_storage as storage
from bench.__main__ import Context, Goal, Metric, heartbeat, join_storm, register, rss
from bench.scenario_fleet import settle, start_member

COORDINATOR_ERRORS = {14, 15, 16}  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
KIP848_MEMBERS = 1000
BEAT_MS = rebalance.BEAT_MS
OFFSETS_PARTITIONS = int(servers.KAFKA_AS_SHIPPED["offsets.topic.num.partitions"])
# Kafka's consumer-protocol heartbeat interval, as groupcoord's in the rebalance scenario.
KIP848_KAFKA = {
    "group.consumer.heartbeat.interval.ms": str(BEAT_MS),
    "group.consumer.min.heartbeat.interval.ms": str(BEAT_MS),
}
KIP848_GROUPCOORD = ["--consumer-heartbeat-interval-ms", str(BEAT_MS)]


# ---- Kafka ------------------------------------------------------------------------------------


def java_hash(s: str) -> int:
    """Java's String.hashCode (of ASCII), as a signed 32-bit int."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group_id: str, partitions: int = OFFSETS_PARTITIONS) -> int:
    """The __consumer_offsets partition of a group (Kafka's Utils.abs(hashCode) % partitions)."""
    h = java_hash(group_id)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


async def groups_ready(port: int, deadline_s: float = 120.0) -> None:
    """Until Kafka answers group requests: FindCoordinator creates __consumer_offsets, then one
    group per offsets partition must stop answering 'loading' / 'not coordinator'."""
    probes: dict[int, str] = {}
    for i in range(100_000):
        probes.setdefault(offsets_partition(f"ready-{i}"), f"ready-{i}")
        if len(probes) == OFFSETS_PARTITIONS:
            break
    deadline = time.monotonic() + deadline_s
    conn = await loadgen.connect(servers.HOST, port)
    try:
        while True:
            body = await conn.request(wire.find_coordinator_v1("ready"))
            if wire.decode_find_coordinator_v1(body)[0] == wire.NONE:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("Kafka: no group coordinator")
            await asyncio.sleep(0.2)
        waiting = list(probes.values())
        while waiting:
            bodies = [await conn.request(storage.offset_fetch_v2(g)) for g in waiting]
            waiting = [
                g
                for g, b in zip(waiting, bodies, strict=True)
                if storage.fetch_error(b) in COORDINATOR_ERRORS
            ]
            if waiting and time.monotonic() > deadline:
                raise TimeoutError(f"Kafka: {len(waiting)} offsets partitions not loaded")
            if waiting:
                await asyncio.sleep(0.2)
    finally:
        conn.close()


async def create_topic(port: int, name: str, partitions: int) -> None:
    """CreateTopics v2 (replication 1); an existing topic is fine."""
    conn = await loadgen.connect(servers.HOST, port)
    try:
        body = await conn.request(wire.create_topics_v2(name, partitions), timeout=60)
        error = wire.decode_create_topics_v2(body)
        if error not in (wire.NONE, 36):  # 36: TOPIC_ALREADY_EXISTS
            raise loadgen.ProtocolError(f"CreateTopics {name}: error {error}")
    finally:
        conn.close()


def disk() -> Path:
    """Where Kafka keeps its log: the disk storage.bench_dir gives groupcoord (not a tmpfs)."""
    return Path(os.environ.get("GROUPCOORD_BENCH_DIR", ".")).resolve()


async def start_kafka(
    core: int | None, overrides: dict[str, str] | None = None, groups: bool = True
) -> servers.Server:
    """A fresh Kafka (in a thread: it takes seconds); with `groups`, ready for group requests."""
    server = await asyncio.to_thread(servers.start_kafka, core, overrides, disk())
    if not groups:
        return server
    try:
        await groups_ready(server.port)
    except BaseException:
        server.stop()
        raise
    return server


def live_heap_mb(pid: int) -> float:
    """Kafka's live heap: `jcmd PID GC.class_histogram` runs a full GC, then totals what lives."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return float("nan")
    out = subprocess.run(
        [jcmd, str(pid), "GC.class_histogram"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout
    found = re.search(r"^Total\s+\d+\s+(\d+)", out, re.MULTILINE)
    return int(found.group(1)) / (1 << 20) if found else float("nan")


# ---- the pairs --------------------------------------------------------------------------------

Measure = Callable[[servers.Server, str], Awaitable[dict[str, float]]]


async def pair(
    ctx: Context,
    what: str,
    measure: Measure,
    groupcoord_args: list[str] | None = None,
    kafka_overrides: dict[str, str] | None = None,
    groupcoord_key_suffix: str = "",
) -> dict[str, float]:
    """`measure(server, tag)` on a fresh groupcoord, then on a fresh Kafka after a warm-up pass
    (tag "warm-": its own groups). groupcoord's keys land plain (with `groupcoord_key_suffix`),
    Kafka's as `kafka.` + key."""
    out: dict[str, float] = {}
    progress(f"{what} on groupcoord")
    gc = servers.start_groupcoord(ctx.server_core, groupcoord_args)
    try:
        out |= {k + groupcoord_key_suffix: v for k, v in (await measure(gc, "")).items()}
    finally:
        gc.stop()
    progress(f"{what} on Kafka: start")
    kafka = await start_kafka(ctx.server_core, kafka_overrides)
    try:
        progress(f"{what} on Kafka: warm-up pass")
        await measure(kafka, "warm-")
        progress(f"{what} on Kafka: measured pass")
        out |= {"kafka." + k: v for k, v in (await measure(kafka, "")).items()}
    except Exception:
        print(f"[bench] kafka log tail:\n{kafka.log_tail(20)}", flush=True)
        raise
    finally:
        kafka.stop()
    return out


def progress(what: str) -> None:
    print(f"[bench]   {what} ...", file=sys.stderr, flush=True)


def kafka_metrics() -> list[Metric]:
    out = [
        Metric("hb_rate", "heartbeats/s, 1,000 members / 100 groups, closed loop", "hb/s"),
        Metric("hb_cpu_us", "  server CPU per heartbeat", "us"),
        Metric("hb_p99", "  p99, closed loop", "ms"),
        Metric("hb_open_p99", "  p99 at 20,000/s, from schedule", "ms"),
        Metric("hb_errors", "  heartbeat errors", "count", Goal("<", 1)),
        Metric("storm_s", "join storm, 1,000 classic members: last join -> leader synced", "s"),
        Metric("storm_all_s", "  last join -> all synced", "s"),
        Metric("storm_cpu_s", "  server CPU during the storm", "s"),
    ]
    for p in (1, 50):
        each = f"{p} partition{'s' if p > 1 else ''}/commit"
        out += [
            Metric(f"c{p}_rate", f"commits/s, {each} (groupcoord --fsync interval:1000)",
                   "commits/s"),
            Metric(f"c{p}_p99", "  p99 at that load", "ms"),
            Metric(f"c{p}_fsync_rate", f"commits/s, {each} (groupcoord --fsync always)",
                   "commits/s"),
            Metric(f"c{p}_fsync_p99", "  p99 at that load", "ms"),
            Metric(f"c{p}_errors", "  commit errors", "count", Goal("<", 1)),
        ]  # fmt: skip
    out += [
        Metric("rss_per_1000", "RSS growth per 1,000 members (10,000 in 1,000 groups)", "MB"),
        Metric("heap_per_1000", "  Kafka: live heap growth per 1,000 members", "MB"),
        Metric("rss_before", "  RSS before the members", "MB"),
        Metric("rss_after", "  RSS with the members", "MB"),
        Metric("rss_setup_s", "  time to form the groups", "s"),
        Metric("kip848_form_s", "1,000 KIP-848 members form (all at one epoch)", "s"),
        Metric("kip848_join1_s", "  1 more joins them", "s"),
        Metric("kip848_cpu_s", "  server CPU, both", "s"),
    ]
    return out


async def hb_measure(ctx: Context, server: servers.Server, _tag: str) -> dict[str, float]:
    got = await heartbeat(ctx, server)  # its members leave at the end: the groups can be reused
    return {
        "hb_rate": got["hb_full_rate"],
        "hb_cpu_us": 1e6 / got["hb_full_per_core"] if got["hb_full_per_core"] else float("nan"),
        "hb_p99": got["hb_full_p99"],
        "hb_open_p99": got["hb_open_p99"],
        "hb_errors": got["hb_errors"],
    }


async def storm_measure(server: servers.Server, tag: str) -> dict[str, float]:
    got = await join_storm(server, f"{tag}storm")
    return {
        "storm_s": got["storm_s"],
        "storm_all_s": got["storm_all_s"],
        "storm_cpu_s": got["storm_server_cpu_s"],
    }


async def commit_measure(ctx: Context, server: servers.Server, tag: str) -> dict[str, float]:
    warmup, measure = (0.5, 2.0) if ctx.quick else (2.0, 10.0)
    if server.name == "kafka":
        await create_topic(server.port, storage.TOPIC, storage.TOPIC_PARTITIONS)
    out: dict[str, float] = {}
    for p in (1, 50):
        conns = await loadgen.connect_many(servers.HOST, server.port, storage.COMMITTERS)
        try:
            committers = storage.committers_on(conns, p, f"{tag}committer-p{p}")
            with loadgen._NoGC():
                phase = await storage.closed_loop(committers, warmup, measure, None)
        finally:
            loadgen.close_all(conns)
        out |= {
            f"c{p}_rate": phase.received / phase.seconds,
            f"c{p}_p99": phase.pct(99),
            f"c{p}_errors": float(phase.errors),
        }
    return out


async def commits(ctx: Context) -> dict[str, float]:
    """Kafka against the like-for-like groupcoord (--fsync interval:1000), then groupcoord's
    default (--fsync always) against the same Kafka figures."""
    topic = ["--topic", f"{storage.TOPIC}:{storage.TOPIC_PARTITIONS}"]
    data = [storage.bench_dir("bench-commit-") for _ in range(2)]
    try:
        out = await pair(
            ctx,
            "commits",
            lambda s, t: commit_measure(ctx, s, t),
            ["--data-dir", str(data[0]), *topic, "--fsync", "interval:1000"],
        )
        progress("commits on groupcoord --fsync always")
        gc = servers.start_groupcoord(
            ctx.server_core, ["--data-dir", str(data[1]), *topic, "--fsync", "always"]
        )
        try:
            got = await commit_measure(ctx, gc, "")
        finally:
            gc.stop()
    finally:
        for d in data:
            shutil.rmtree(d, ignore_errors=True)
    for p in (1, 50):
        for key in ("rate", "p99"):
            out[f"c{p}_fsync_{key}"] = got[f"c{p}_{key}"]
            out[f"kafka.c{p}_fsync_{key}"] = out[f"kafka.c{p}_{key}"]
        out[f"c{p}_errors"] += got[f"c{p}_errors"]
    return out


async def rss_measure(ctx: Context, server: servers.Server, tag: str) -> dict[str, float]:
    n = 1000 * 10
    if tag:  # the warm-up: groups formed and left once, so the JIT has compiled the join path
        conns = await loadgen.connect_many(servers.HOST, server.port, 1000)
        try:
            members = await loadgen.form_groups(conns, 100, 10, deadline_s=300, prefix="warm")
            await loadgen.leave_all(members)
        finally:
            loadgen.close_all(conns)
        return {}
    jvm = server.name == "kafka"
    heap0 = live_heap_mb(server.pid) if jvm else 0.0
    got = await rss(ctx, server)
    out = {
        "rss_per_1000": got["rss_per_member"] * 1000 / 1024,
        "rss_before": got["rss_before"],
        "rss_after": got["rss_after"],
        "rss_setup_s": got["rss_setup_s"],
    }
    if jvm:  # the members stay in their groups until their sessions expire (60 s): live state
        out["heap_per_1000"] = (live_heap_mb(server.pid) - heap0) * 1000 / n
    return out


async def kip848_measure(server: servers.Server, tag: str) -> dict[str, float]:
    await rebalance.create_topic(server.port, 2 * KIP848_MEMBERS)
    cpu0 = server.cpu_s()
    n = KIP848_MEMBERS
    got = await rebalance.run_phases(server.port, "consumer", n, prefix=tag, phases=True)
    return {
        "kip848_form_s": got[f"rb_consumer_form_{n}"],
        "kip848_join1_s": got[f"rb_consumer_join1_{n}"],
        "kip848_cpu_s": server.cpu_s() - cpu0,
    }


@register(
    "kafka",
    "groupcoord vs Apache Kafka 4.4's group coordinator: heartbeats, join storm, commits, RSS, "
    "KIP-848",
    kafka_metrics(),
    serverless=True,
    versus="kafka",
)
async def kafka(ctx: Context, _server: object) -> dict[str, float]:
    out: dict[str, float] = {}
    steps: list[tuple[str, Callable[[], Awaitable[dict[str, float]]]]] = [
        ("heartbeats", lambda: pair(ctx, "heartbeats", lambda s, t: hb_measure(ctx, s, t))),
        ("join storm", lambda: pair(ctx, "join storm", storm_measure)),
        ("commits", lambda: commits(ctx)),
        ("RSS", lambda: pair(ctx, "RSS", lambda s, t: rss_measure(ctx, s, t))),
        ("KIP-848", lambda: pair(ctx, "KIP-848", kip848_measure, KIP848_GROUPCOORD, KIP848_KAFKA)),
    ]
    for name, step in steps:  # a failed comparison is a note; the others still report
        try:
            out |= await step()
        except Exception as e:
            ctx.notes.append(f"kafka/{name}: failed: {type(e).__name__}: {e}")
            traceback.print_exc()
    ctx.kafka_notes += [
        "Kafka: one KRaft node as kafka-server-start.sh runs it (G1, -Xms1G -Xmx1G, its default "
        "threads and 50 offsets partitions), pinned to the server core as groupcoord is; every "
        "Kafka figure follows a warm-up pass of the same workload on other groups (not counted), "
        "so its JIT has compiled the paths measured",
        "commits: Kafka acknowledges once a commit is in its log, without an fsync (durability by "
        "replication); the like-for-like groupcoord is --fsync interval:1000; --fsync always "
        "(groupcoord's default: every reply waits for its fsync) is against the same Kafka figure",
        "RSS: Kafka's heap is committed up front (-Xms1G) and its RSS grows by the heap pages the "
        "load touches, garbage included; 'live heap growth' is after a full GC (jcmd)",
        f"KIP-848: both servers' consumer heartbeat interval {BEAT_MS} ms; a member acks an "
        "assignment at once",
    ]
    return out


# ---- sidecar vs Kafka direct ------------------------------------------------------------------


@register(
    "sidecar_kafka",
    "sidecar mode in front of Kafka 4.4: produce/consume through groupcoord --state local "
    "(groupcoord) vs straight to Kafka (kafka)",
    sidecar.METRICS,
    serverless=True,
    versus="kafka",
)
async def sidecar_kafka(ctx: Context, _server: object) -> dict[str, float]:
    kafka = await start_kafka(None, groups=False)
    try:

        async def create(name: str) -> None:
            await create_topic(kafka.port, name, sidecar.PARTITIONS)

        got = await sidecar.compare(ctx, kafka.port, create, "kafka.", warm=True)
    finally:
        kafka.stop()
    ctx.kafka_notes.append(
        "sidecar_kafka: one produce and consume pass on each path first, not counted (Kafka's "
        "warm-up); neither server pinned, as in the sidecar scenario"
    )
    return got


# ---- fleet failover on Kafka ------------------------------------------------------------------


@register(
    "fleet_kafka",
    f"sidecar fleet in front of Kafka 4.4: {fleet.FLEET_SIZE} members, kill -9 failover rounds "
    f"({fleet.FAILOVER_ROUNDS}, --quick {fleet.QUICK_FAILOVER_ROUNDS})",
    fleet.failover_metrics(Goal("<", 1.5), Goal("<", 3.0)),
    serverless=True,
)
async def fleet_kafka(ctx: Context, _server: object) -> dict[str, float]:
    kafka = await start_kafka(None)
    members: list[fleet.Member] = []
    graveyard: list[str] = []
    try:
        await create_topic(kafka.port, storage.TOPIC, 1)
        members = [start_member(ctx, kafka.port) for _ in range(fleet.FLEET_SIZE)]
        await settle(members)
        await fleet.wait_topic([m.port for m in members])
        return await fleet.failovers(ctx, members, kafka.port, graveyard, "fleet_kafka")
    finally:
        for m in members:
            m.stop()
        kafka.stop()


# ---- idle CPU ---------------------------------------------------------------------------------


def cpu_ns(pid: int) -> int:
    """CPU time of every live thread of `pid` (/proc/PID/task/*/schedstat, nanoseconds)."""
    total = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError, ValueError, IndexError):  # a thread that just ended
            total += int(stat.read_text().split()[0])
    return total


async def idle_ms(ctx: Context, server: servers.Server) -> float:
    """ms of CPU per 10 s once start-up has settled: two consecutive 2 s windows within 25% (or
    5 ms) of each other, at most 60 s; then one window of 10 s (3 s with --quick, scaled)."""
    step = 2.0
    deadline = time.monotonic() + 60
    last = None
    while time.monotonic() < deadline:
        c0 = cpu_ns(server.pid)
        await asyncio.sleep(step)
        used = (cpu_ns(server.pid) - c0) / 1e6
        if last is not None and abs(used - last) <= max(5.0, 0.25 * last):
            break
        last = used
    window = 3.0 if ctx.quick else 10.0
    c0 = cpu_ns(server.pid)
    await asyncio.sleep(window)
    if server.proc.poll() is not None:
        raise RuntimeError(f"{server.name} exited while idle:\n{server.log_tail()}")
    return (cpu_ns(server.pid) - c0) / 1e6 * 10.0 / window


@register(
    "idle",
    "idle CPU, no clients: standalone groupcoord, a --state local sidecar and a fleet member "
    "(state on the upstream) in front of an idle Kafka 4.4; Kafka itself for reference",
    [
        Metric("idle_standalone", "idle CPU, standalone (kafka: the broker)", "ms/10s"),
        Metric("idle_sidecar_local", "idle CPU, sidecar --state local", "ms/10s"),
        Metric("idle_fleet_member", "idle CPU, fleet member (state on the upstream)", "ms/10s"),
    ],
    serverless=True,
    versus="kafka",
)
async def idle(ctx: Context, _server: object) -> dict[str, float]:
    out: dict[str, float] = {}
    gc = servers.start_groupcoord(ctx.server_core)
    try:
        out["idle_standalone"] = await idle_ms(ctx, gc)
    finally:
        gc.stop()
    kafka = await start_kafka(ctx.server_core, groups=False)
    try:
        out["kafka.idle_standalone"] = await idle_ms(ctx, kafka)
        local = start_member(ctx, kafka.port, "--state", "local")
        try:
            out["idle_sidecar_local"] = await idle_ms(ctx, local.server)
        finally:
            local.stop()
        member = start_member(ctx, kafka.port)
        try:
            await settle([member])
            out["idle_fleet_member"] = await idle_ms(ctx, member.server)
        finally:
            member.stop()
    finally:
        kafka.stop()
    ctx.kafka_notes.append(
        "idle: CPU of all the server's threads from /proc/PID/task/*/schedstat once two "
        f"consecutive 2 s windows agree, over {'3 s (--quick, scaled)' if ctx.quick else '10 s'}; "
        "the sidecars' Kafka is idle too and not counted; every server on the server core"
    )
    return out

"""`serve --workers 2` vs one fleet member: does a second core raise heartbeats/s and commits/s?

Issue 37's bar: 2 members on 2 cores >= 1.7x one member. One tansu (memory storage) on the server
core, as in bench/scenario_fleet.py. Two setups, one after the other, the same load against each:
- one: a fleet of one member (`--upstream`, state on the upstream), pinned to the server core;
- workers2: `--workers 2` (coordinator.sidecar.workers), the parent and its workers allowed on
  every core (the workers inherit the parent's affinity).
Load: COMMITTERS closed-loop committers (OffsetCommit v7, generation -1, each its own connection
and group, one commit in flight each: bench/scenario_storage), then HB_GROUPS x HB_PER_GROUP
members heartbeating back to back (bench/loadgen.closed_loop). Each connection goes where a Kafka
client sends a group's requests: to the coordinator FindCoordinator names for its group, asked on
the client port (`coordinator_port`). With one member that is its broker listener; with 2 workers
it is the node of the worker owning the group (coordinator.sidecar.worker_nodes), so few requests
are forwarded between the workers: `workers2_forwarded` counts them (the workers' metrics). Before
the workers had nodes of their own, FindCoordinator named the shared broker port, the kernel
spread connections over the workers, and about half of the requests were forwarded.

The figures need a machine with a core for each worker AND for the generator and tansu; on a
2-core machine the generator shares a core with a worker, and tansu another, so the ratio is a
lower bound, noted with the load average at the start and the end.
"""

from __future__ import annotations

import asyncio
import os
import urllib.request
from pathlib import Path

from bench import loadgen, servers, wire
from bench.__main__ import Context, Goal, Metric, register
from bench.scenario_fleet import (
    COMMITTERS,
    Member,
    create_topic,
    settle,
    wait_topic,
)
from bench.scenario_observability import metrics_port
from bench.scenario_storage import TOPIC as COMMIT_TOPIC
from bench.scenario_storage import Committer, commit_errors, offset_commit_v7
from bench.scenario_storage import closed_loop as commit_closed_loop

HB_GROUPS, HB_PER_GROUP = 20, 10
WORKERS = 2


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / servers.CLK_TCK


def tree_cpu_s(server: servers.Server) -> float:
    """CPU of the server and its live workers (a worker's CPU counts while it runs)."""
    return _cpu_s(server.pid) + sum(_cpu_s(c) for c in _children(server.pid))


async def coordinator_port(port: int, group: str, deadline_s: float = 60) -> int:
    """The port FindCoordinator (asked on `port`) names for `group`, as a client asks it."""
    conn = await loadgen.connect(servers.HOST, port)
    try:
        loop = asyncio.get_running_loop()
        end = loop.time() + deadline_s
        while True:
            error, _, found = wire.decode_find_coordinator_v1(
                await conn.request(wire.find_coordinator_v1(group))
            )
            if not error:
                return found
            if loop.time() > end:
                raise loadgen.ProtocolError(f"FindCoordinator({group}): error {error}")
            await asyncio.sleep(0.1)
    finally:
        conn.close()


def forwarded(views: list[Member]) -> float:
    """Group requests the workers forwarded to each other, so far (their metrics)."""
    total = 0.0
    for view in views:
        with urllib.request.urlopen(f"http://{servers.HOST}:{view.http_port}/metrics") as r:
            for line in r.read().decode().splitlines():
                if line.startswith("groupcoord_fleet_forwarded_requests_total"):
                    total += float(line.rsplit(" ", 1)[1])
    return total


async def _cpu_window(server: servers.Server, warmup: float, measure: float) -> float:
    """The server tree's CPU seconds over a closed loop's measuring window."""
    await asyncio.sleep(warmup)
    start = tree_cpu_s(server)
    await asyncio.sleep(measure)
    return tree_cpu_s(server) - start


async def commits(
    server: servers.Server, warmup: float, measure: float
) -> tuple[float, float, float]:
    port = server.port
    groups = [f"workers-commit-{os.getpid()}-{k}" for k in range(COMMITTERS)]
    ports = [await coordinator_port(port, g) for g in groups]
    conns = [await loadgen.connect(servers.HOST, p) for p in ports]
    try:
        committers = [
            Committer(c, wire.Template.of(*offset_commit_v7(g, range(1), k)))
            for k, (c, g) in enumerate(zip(conns, groups, strict=True))
        ]
        for k, c in enumerate(committers):
            for _ in range(200):  # a group's partition may still be loading: retry
                body = await c.conn.request(offset_commit_v7(groups[k], range(1), 0))
                if not commit_errors(body):
                    break
                await asyncio.sleep(0.05)
        with loadgen._NoGC():
            cpu = asyncio.create_task(_cpu_window(server, warmup, measure))
            phase = await commit_closed_loop(committers, warmup, measure, None)
            cpu_s = await cpu
    finally:
        loadgen.close_all(conns)
    return phase.received / phase.seconds, 100 * cpu_s / measure, float(phase.errors)


async def heartbeats(
    server: servers.Server, warmup: float, measure: float
) -> tuple[float, float, float]:
    conns: list[loadgen.Conn] = []
    for g in range(HB_GROUPS):  # form_groups: member i of group g on conns[g * per_group + i]
        port = await coordinator_port(server.port, f"bench-{g}")
        conns += await loadgen.connect_many(servers.HOST, port, HB_PER_GROUP)
    try:
        members = await loadgen.form_groups(conns, HB_GROUPS, HB_PER_GROUP, deadline_s=120)
        await asyncio.sleep(0.3)
        full = await loadgen.closed_loop(members, warmup, measure, lambda: tree_cpu_s(server))
        await loadgen.leave_all(members)
    finally:
        loadgen.close_all(conns)
    return full.rate, 100 * full.server_cpu_s / measure, float(full.errors)


async def one_setup(
    ctx: Context, tansu: servers.Server, tag: str, workers: int
) -> dict[str, float]:
    warmup, measure = (0.5, 2.0) if ctx.quick else (1.0, 5.0)
    args = ["--upstream", f"{servers.HOST}:{tansu.port}", "--fleet-listen", f"{servers.HOST}:0"]
    if workers > 1:
        args += ["--workers", str(workers)]
    # One member on the server core; the workers on every core (they inherit the parent's).
    every = tuple(range(os.cpu_count() or 1))
    cores = ctx.server_core if workers == 1 or ctx.server_core is None else every
    server = servers.start_groupcoord(cores, args)
    try:
        http = metrics_port(server)
        assert http is not None
        views = [Member(server, http + i) for i in range(workers)]
        await settle(views)
        await wait_topic([server.port])
        before = forwarded(views)
        rate, commit_cpu, errors = await commits(server, warmup, measure)
        hb_rate, hb_cpu, hb_errors = await heartbeats(server, warmup, measure)
        moved = forwarded(views) - before
    finally:
        server.stop()
    return {
        f"{tag}_forwarded": moved,
        f"{tag}_commit_rate": rate,
        f"{tag}_commit_cpu": commit_cpu,
        f"{tag}_hb_rate": hb_rate,
        f"{tag}_hb_cpu": hb_cpu,
        f"{tag}_errors": errors + hb_errors,
    }


@register(
    "workers",
    f"serve --workers {WORKERS} vs one fleet member, one tansu; {COMMITTERS} committers, "
    f"{HB_GROUPS * HB_PER_GROUP} members heartbeating back to back",
    [
        Metric("one_commit_rate", "commits/s, one member (one core)", "commits/s"),
        Metric("workers2_commit_rate", f"commits/s, --workers {WORKERS}", "commits/s"),
        Metric("commit_scaling", f"commits/s: --workers {WORKERS} / one", "ratio", Goal(">=", 1.7)),
        Metric("one_commit_per_cpu", "  commits per groupcoord CPU-second, one member", "c/s"),
        Metric("workers2_commit_per_cpu", f"  the same, --workers {WORKERS}", "c/s"),
        Metric(
            "commit_scaling_cpu_bound",
            f"  commits/s scaling with a core per worker, projected ({WORKERS} x per-CPU ratio)",
            "ratio",
        ),
        Metric("one_hb_rate", "heartbeats/s, one member (one core)", "hb/s"),
        Metric("workers2_hb_rate", f"heartbeats/s, --workers {WORKERS}", "hb/s"),
        Metric("hb_scaling", f"heartbeats/s: --workers {WORKERS} / one", "ratio", Goal(">=", 1.7)),
        Metric("one_hb_cpu", "  groupcoord CPU under that load, one member", "%"),
        Metric("workers2_hb_cpu", f"  groupcoord CPU under that load, --workers {WORKERS}", "%"),
        Metric("one_hb_per_cpu", "  heartbeats per groupcoord CPU-second, one member", "hb/s"),
        Metric("workers2_hb_per_cpu", f"  the same, --workers {WORKERS}", "hb/s"),
        Metric(
            "hb_scaling_cpu_bound",
            f"  hb/s scaling with a core per worker, projected ({WORKERS} x per-CPU ratio)",
            "ratio",
        ),
        Metric(
            "workers2_forwarded",
            f"  group requests forwarded between the --workers {WORKERS} (both loads)",
            "count",
        ),
        Metric("load_start", "load average (1 min) at the start", "load"),
        Metric("load_end", "load average (1 min) at the end", "load"),
        Metric("errors", "errors (commits + heartbeats, both setups)", "count", Goal("<", 1)),
    ],
    serverless=True,
)
async def workers(ctx: Context, _server: object) -> dict[str, float]:
    path = servers.tansu_path()
    if path is None:
        raise RuntimeError("tansu not installed (make peers)")
    out: dict[str, float] = {"load_start": os.getloadavg()[0]}
    tansu = servers.start_tansu(path, ctx.server_core)
    try:
        create_topic(tansu.port, COMMIT_TOPIC, 1)
        out |= await one_setup(ctx, tansu, "one", 1)
        out |= await one_setup(ctx, tansu, "workers2", WORKERS)
    finally:
        tansu.stop()
    out["load_end"] = os.getloadavg()[0]
    out["commit_scaling"] = out["workers2_commit_rate"] / max(out["one_commit_rate"], 1e-9)
    out["hb_scaling"] = out["workers2_hb_rate"] / max(out["one_hb_rate"], 1e-9)
    out["errors"] = out["one_errors"] + out["workers2_errors"]
    # What the CPU of a heartbeat says when nothing else competes for the cores (a 2-core machine
    # also runs the generator, which then shares a core with a worker): N cores, each worker at
    # its measured heartbeats per CPU-second, against one member at its own.
    for tag in ("one", "workers2"):
        out[f"{tag}_hb_per_cpu"] = out[f"{tag}_hb_rate"] / max(out[f"{tag}_hb_cpu"] / 100, 1e-9)
        out[f"{tag}_commit_per_cpu"] = out[f"{tag}_commit_rate"] / max(
            out[f"{tag}_commit_cpu"] / 100, 1e-9
        )
    out["commit_scaling_cpu_bound"] = (
        WORKERS * out["workers2_commit_per_cpu"] / max(out["one_commit_per_cpu"], 1e-9)
    )
    out["hb_scaling_cpu_bound"] = (
        WORKERS * out["workers2_hb_per_cpu"] / max(out["one_hb_per_cpu"], 1e-9)
    )
    ctx.notes.append(
        f"workers: load average {out['load_start']:.1f} at the start, {out['load_end']:.1f} at "
        f"the end, on {os.cpu_count()} cores shared with the generator and tansu; each "
        "connection goes to the coordinator FindCoordinator names for its group"
    )
    return out

"""`serve --workers 2` vs one fleet member: does a second core raise heartbeats/s and commits/s?

Issue 37's bar: 2 members on 2 cores >= 1.7x one member. One tansu (memory storage) on the server
core, as in bench/scenario_fleet.py. Two setups, one after the other, the same load against each:
- one: a fleet of one member (`--upstream`, state on the upstream), pinned to the server core;
- workers2: `--workers 2` (coordinator.sidecar.workers), the parent and its workers allowed on
  every core (the workers inherit the parent's affinity).
Load: COMMITTERS closed-loop committers (OffsetCommit v7, generation -1, each its own connection
and group, one commit in flight each: bench/scenario_storage), then HB_GROUPS x HB_PER_GROUP
members heartbeating back to back (bench/loadgen.closed_loop). All connections go to the one
client port: with 2 workers the kernel spreads them (SO_REUSEPORT), and a request that reaches the
worker not owning its group is forwarded to the other one over the fleet listener (about half).

The figures need a machine with a core for each worker AND for the generator and tansu; on a
2-core machine the generator shares a core with a worker, and tansu another, so the ratio is a
lower bound, noted with the load average at the start and the end.
"""

from __future__ import annotations

import asyncio
import os
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


async def commits(port: int, warmup: float, measure: float) -> tuple[float, float]:
    conns = [await loadgen.connect(servers.HOST, port) for _ in range(COMMITTERS)]
    try:
        groups = [f"workers-commit-{os.getpid()}-{k}" for k in range(COMMITTERS)]
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
            phase = await commit_closed_loop(committers, warmup, measure, None)
    finally:
        loadgen.close_all(conns)
    return phase.received / phase.seconds, float(phase.errors)


async def heartbeats(
    server: servers.Server, warmup: float, measure: float
) -> tuple[float, float, float]:
    conns = await loadgen.connect_many(servers.HOST, server.port, HB_GROUPS * HB_PER_GROUP)
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
        rate, errors = await commits(server.port, warmup, measure)
        hb_rate, hb_cpu, hb_errors = await heartbeats(server, warmup, measure)
    finally:
        server.stop()
    return {
        f"{tag}_commit_rate": rate,
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
    out["hb_scaling_cpu_bound"] = (
        WORKERS * out["workers2_hb_per_cpu"] / max(out["one_hb_per_cpu"], 1e-9)
    )
    ctx.notes.append(
        f"workers: load average {out['load_start']:.1f} at the start, {out['load_end']:.1f} at "
        f"the end, on {os.cpu_count()} cores shared with the generator and tansu; about half of "
        "the --workers requests reach the worker not owning their group and are forwarded"
    )
    return out

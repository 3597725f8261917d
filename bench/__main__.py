"""`python -m bench [--only heartbeat,join,rss] [--quick] [--out results.json]`

A registry of scenarios. Each scenario runs against one freshly started server at a time and returns
its measurements as {metric key: value}; the runner starts each target (groupcoord, then tansu) per
scenario, so one scenario's state never leaks into the next, and prints one table with the ratio
groupcoord/tansu and each target checked against the issue's goal.

To add a benchmark (later issues: log/commit throughput, topic hash, sidecar), write an
`async def run(ctx, server) -> dict[str, float]` in a module `bench/scenario_<name>.py`
and `register()` it with its metrics; the runner imports every such module. A scenario that
starts its own processes (or none) registers with `serverless=True`: it runs once with
`server=None`, its keys land in the groupcoord column, and keys prefixed `tansu.` land in the
tansu column. A scenario registered with `versus="kafka"` compares groupcoord with Apache Kafka
4.4 instead: its keys prefixed `kafka.` fill the kafka column of a second table, "groupcoord vs
Kafka 4.4" (bench/scenario_kafka.py).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import math
import os
import pkgutil
import platform
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import uvloop

from bench import loadgen, servers


@dataclass(frozen=True)
class Goal:
    op: str  # ">=" or "<"
    value: float

    def ok(self, v: float) -> bool:
        return v >= self.value if self.op == ">=" else v < self.value

    def __str__(self) -> str:
        return f"{self.op} {self.value:g}"


@dataclass(frozen=True)
class Metric:
    key: str
    label: str
    unit: str
    goal: Goal | None = None


@dataclass
class Context:
    quick: bool
    server_core: int | None
    notes: list[str] = field(default_factory=list)
    kafka_notes: list[str] = field(default_factory=list)  # printed under "groupcoord vs Kafka"


Run = Callable[[Context, Any], Awaitable[dict[str, float]]]


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    run: Run
    metrics: list[Metric]
    calibrated: bool = False  # also run against the null responder (the generator's ceiling)
    serverless: bool = False  # runs once, starts what it needs itself; gets server=None
    versus: str = "tansu"  # the column groupcoord is compared with: "tansu" or "kafka"


SCENARIOS: dict[str, Scenario] = {}


def register(
    name: str,
    title: str,
    metrics: list[Metric],
    calibrated: bool = False,
    serverless: bool = False,
    versus: str = "tansu",
) -> Callable[[Run], Run]:
    def deco(fn: Run) -> Run:
        SCENARIOS[name] = Scenario(name, title, fn, metrics, calibrated, serverless, versus)
        return fn

    return deco


# ---- scenarios ----------------------------------------------------------------------------------

HB_GROUPS, HB_PER_GROUP = 100, 10
OPEN_RATE = 20_000


@register(
    "heartbeat",
    "heartbeats, 1,000 members / 100 groups / 1,000 connections",
    [
        Metric("hb_full_rate", "full load throughput", "hb/s", Goal(">=", 50_000)),
        Metric("hb_full_p50", "full load p50", "ms"),
        Metric("hb_full_p99", "full load p99", "ms"),
        Metric("hb_full_server_cpu", "full load server CPU", "%"),
        Metric("hb_full_per_core", "full load hb/s per server core", "hb/s"),
        Metric("hb_full_gen_cpu", "full load generator CPU", "%"),
        Metric("hb_open_rate", "20k/s achieved", "hb/s"),
        Metric("hb_open_p50", "20k/s p50 (from schedule)", "ms"),
        Metric("hb_open_p99", "20k/s p99 (from schedule)", "ms", Goal("<", 5)),
        Metric("hb_open_p999", "20k/s p99.9 (from schedule)", "ms"),
        Metric("hb_open_lag_p99", "20k/s generator send lag p99", "ms"),
        Metric("hb_open_server_cpu", "20k/s server CPU", "%"),
        Metric("hb_errors", "heartbeat errors", "count", Goal("<", 1)),
    ],
    calibrated=True,
)
async def heartbeat(ctx: Context, server: servers.Server) -> dict[str, float]:
    warmup, measure = (0.5, 2.0) if ctx.quick else (2.0, 10.0)
    conns = await loadgen.connect_many(servers.HOST, server.port, HB_GROUPS * HB_PER_GROUP)
    try:
        if server.name == "null":  # the calibration responder has no groups: beat blind
            members = loadgen.fixed_members(conns, HB_PER_GROUP)
        else:
            members = await loadgen.form_groups(conns, HB_GROUPS, HB_PER_GROUP, deadline_s=120)
        full = await loadgen.closed_loop(members, warmup, measure, server.cpu_s)
        await asyncio.sleep(0.5)
        opened = await loadgen.open_loop(members, OPEN_RATE, warmup, measure, server.cpu_s)
        if server.name != "null":
            await loadgen.leave_all(members)
    finally:
        loadgen.close_all(conns)
    if full.generator_cpu_s / measure > 0.9:
        ctx.notes.append(
            f"heartbeat/{server.name}: generator CPU "
            f"{100 * full.generator_cpu_s / measure:.0f}%: full-load rate is generator-bound; "
            "see 'hb/s per server core'"
        )
    return {
        "hb_full_rate": full.rate,
        "hb_full_p50": full.pct(50),
        "hb_full_p99": full.pct(99),
        "hb_full_server_cpu": 100 * full.server_cpu_s / measure,
        "hb_full_per_core": full.rate / max(full.server_cpu_s / measure, 1e-9),
        "hb_full_gen_cpu": 100 * full.generator_cpu_s / measure,
        "hb_open_rate": opened.rate,
        "hb_open_p50": opened.pct(50),
        "hb_open_p99": opened.pct(99),
        "hb_open_p999": opened.pct(99.9),
        "hb_open_lag_p99": opened.pct(99, opened.send_lag_ns),
        "hb_open_server_cpu": 100 * opened.server_cpu_s / measure,
        "hb_errors": full.errors + opened.errors,
    }


STORM_MEMBERS = 1000
STORM_BEAT_S = 0.1  # heartbeat of members synced into a partial generation


@register(
    "join",
    f"join storm, {STORM_MEMBERS:,} members into one group, initial delay 0",
    [
        Metric("storm_s", "last JoinGroup -> leader SyncGroup", "s", Goal("<", 1)),
        Metric("storm_all_s", "last JoinGroup -> all synced", "s"),
        Metric("storm_generations", "generations seen", "count"),
        Metric("storm_server_cpu_s", "server CPU during the storm", "s"),
    ],
)
async def join(ctx: Context, server: servers.Server) -> dict[str, float]:
    return await join_storm(server, "storm")


async def join_storm(server: servers.Server, group_id: str) -> dict[str, float]:
    """The join scenario's storm into `group_id` (a fresh group: members of an earlier storm stay
    until their sessions expire)."""
    conns = await loadgen.connect_many(servers.HOST, server.port, STORM_MEMBERS)
    try:
        cpu0 = server.cpu_s()
        r = await loadgen.join_storm(conns, group_id, STORM_BEAT_S, deadline_s=120)
        cpu = server.cpu_s() - cpu0
    finally:
        loadgen.close_all(conns)
    return {
        "storm_s": r.seconds,
        "storm_all_s": r.all_synced_s,
        "storm_generations": r.generations,
        "storm_server_cpu_s": cpu,
    }


RSS_GROUPS, RSS_PER_GROUP = 1000, 10


@register(
    "rss",
    f"RSS, {RSS_GROUPS * RSS_PER_GROUP:,} members / {RSS_GROUPS:,} stable groups, 1 conn each",
    [
        Metric("rss_per_member", "RSS per member (total)", "KB", Goal("<", 2)),
        Metric("rss_conn_per_member", "  of which the connection", "KB"),
        Metric("rss_state_per_member", "  of which group state", "KB"),
        Metric("rss_before", "RSS idle", "MB"),
        Metric("rss_after", "RSS with members", "MB"),
        Metric("rss_setup_s", "time to form the groups", "s"),
    ],
)
async def rss(ctx: Context, server: servers.Server) -> dict[str, float]:
    n = RSS_GROUPS * RSS_PER_GROUP
    await asyncio.sleep(1.0)
    before = server.rss_kb()
    conns = await loadgen.connect_many(servers.HOST, server.port, n)
    try:
        await asyncio.sleep(1.0)
        connected = server.rss_kb()
        t0 = time.monotonic()
        await loadgen.form_groups(conns, RSS_GROUPS, RSS_PER_GROUP, deadline_s=300)
        setup_s = time.monotonic() - t0
        await asyncio.sleep(2.0)
        after = server.rss_kb()
    finally:
        loadgen.close_all(conns)
    return {
        "rss_per_member": (after - before) / n,
        "rss_conn_per_member": (connected - before) / n,
        "rss_state_per_member": (after - connected) / n,
        "rss_before": before / 1024,
        "rss_after": after / 1024,
        "rss_setup_s": setup_s,
    }


# ---- runner -------------------------------------------------------------------------------------


def start_target(name: str, ctx: Context, args: argparse.Namespace) -> servers.Server:
    if name == "groupcoord":
        return servers.start_groupcoord(ctx.server_core, args.groupcoord_arg)
    if name == "null":
        return servers.start_null(ctx.server_core)
    path = Path(args.tansu) if args.tansu else servers.tansu_path()
    if path is None:
        raise FileNotFoundError(
            f"tansu not found in {servers.peers_dir()}/bin (run `make peers` or pass --tansu)"
        )
    return servers.start_tansu(path, ctx.server_core)


async def run_all(
    args: argparse.Namespace, ctx: Context, selected: list[Scenario]
) -> dict[str, dict[str, dict[str, float]]]:
    results: dict[str, dict[str, dict[str, float]]] = {}
    for sc in selected:
        if sc.serverless:
            await run_serverless(ctx, sc, results)
            continue
        for target in args.targets:
            if target == "null" and not sc.calibrated:
                continue
            load = Path("/proc/loadavg").read_text().split()[0]
            print(
                f"[bench] {sc.name} on {target} (loadavg {load}) ...", file=sys.stderr, flush=True
            )
            if float(load) > 1.5:
                ctx.notes.append(
                    f"{sc.name}/{target}: started at loadavg {load}: other work shares the cores"
                )
            t0 = time.monotonic()
            try:
                server = start_target(target, ctx, args)
            except Exception as e:  # a missing/broken server is a result, not a crash
                ctx.notes.append(f"{sc.name}/{target}: not started: {e}")
                print(f"[bench]   {e}", file=sys.stderr)
                continue
            try:
                results.setdefault(sc.name, {})[target] = await sc.run(ctx, server)
            except Exception as e:
                ctx.notes.append(f"{sc.name}/{target}: failed: {type(e).__name__}: {e}")
                traceback.print_exc()
                tail = server.log_tail(10)
                if tail:
                    print(f"[bench]   {target} log tail:\n{tail}", file=sys.stderr)
            finally:
                alive = server.proc.poll() is None
                server.stop()
                if not alive:
                    ctx.notes.append(f"{sc.name}/{target}: server died ({server.proc.returncode})")
            print(f"[bench]   done in {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)
    return results


async def run_serverless(
    ctx: Context, sc: Scenario, results: dict[str, dict[str, dict[str, float]]]
) -> None:
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"[bench] {sc.name} (loadavg {load}) ...", file=sys.stderr, flush=True)
    if float(load) > 1.5:
        ctx.notes.append(f"{sc.name}: started at loadavg {load}: other work shares the cores")
    t0 = time.monotonic()
    try:
        got = await sc.run(ctx, None)
    except Exception as e:
        ctx.notes.append(f"{sc.name}: failed: {type(e).__name__}: {e}")
        traceback.print_exc()
        return
    per = results.setdefault(sc.name, {})
    for key, value in got.items():
        target, dot, rest = key.partition(".")
        if dot and target in ("tansu", "kafka", "null"):
            per.setdefault(target, {})[rest] = value
        else:
            per.setdefault("groupcoord", {})[key] = value
    print(f"[bench]   done in {time.monotonic() - t0:.1f}s", file=sys.stderr, flush=True)


def load_scenario_modules() -> None:
    """Import every `bench/scenario_*.py`: each registers its scenarios on import."""
    # Run as `python -m bench`, this module is `__main__`: make `from bench.__main__ import
    # register` in a scenario module find this very module (one registry), not load a copy.
    sys.modules.setdefault("bench.__main__", sys.modules[__name__])
    package = Path(__file__).parent
    for info in sorted(pkgutil.iter_modules([str(package)]), key=lambda m: m.name):
        if info.name.startswith("scenario_"):
            importlib.import_module(f"bench.{info.name}")


def fmt(v: float | None) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.3g}"


def fmt_ratio(v: float | None) -> str:
    return "-" if v is None or math.isnan(v) else f"{v:.2f}"


def build_rows(
    selected: list[Scenario], results: dict[str, dict[str, dict[str, float]]]
) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for sc in selected:
        per = results.get(sc.name, {})
        for m in sc.metrics:
            g = per.get("groupcoord", {}).get(m.key)
            t = per.get(sc.versus, {}).get(m.key)
            z = per.get("null", {}).get(m.key)
            ratio = g / t if g is not None and t not in (None, 0) else None
            verdict = (
                "" if m.goal is None else ("-" if g is None else "PASS" if m.goal.ok(g) else "FAIL")
            )
            rows.append(
                {
                    "scenario": sc.name,
                    "metric": m.label.strip(),
                    "key": m.key,
                    "unit": m.unit,
                    "versus": sc.versus,
                    "groupcoord": g,
                    sc.versus: t,
                    "null": z,
                    "ratio": ratio,
                    "target": str(m.goal) if m.goal else None,
                    f"{sc.versus}_pass": (m.goal.ok(t) if m.goal and t is not None else None),
                    "pass": verdict or None,
                    "_label": m.label,
                }
            )
    return rows


def print_table(rows: list[dict[str, object]], versus: str = "tansu") -> None:
    header = [
        "scenario",
        "metric",
        "unit",
        "groupcoord",
        versus,
        f"ratio g/{versus[0]}",
        "target",
        "pass",
        "null",
    ]
    table = [header]
    for r in rows:
        table.append(
            [
                str(r["scenario"]),
                str(r["_label"]),
                str(r["unit"]),
                fmt(r["groupcoord"]),  # type: ignore[arg-type]
                fmt(r[versus]),  # type: ignore[arg-type]
                fmt_ratio(r["ratio"]),  # type: ignore[arg-type]
                str(r["target"] or ""),
                str(r["pass"] or ""),
                fmt(r["null"]) if r["null"] is not None else "",  # type: ignore[arg-type]
            ]
        )
    if versus != "tansu":  # the null responder calibrates only the heartbeat scenario
        table = [row[:-1] for row in table]
        header = table[0]
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    right = {3, 4, 5, 8}
    for k, row in enumerate(table):
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def main(argv: list[str] | None = None) -> int:
    load_scenario_modules()
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--only", default="", help=f"comma list of: {','.join(SCENARIOS)}")
    p.add_argument("--quick", action="store_true", help="shorter measuring windows")
    p.add_argument("--out", help="write results as JSON to this path")
    p.add_argument(
        "--targets",
        default="groupcoord,tansu,null",
        help="comma list of groupcoord, tansu, null (a do-nothing responder: generator ceiling)",
    )
    p.add_argument(
        "--tansu", help="path to the tansu binary (default: $GROUPCOORD_PEERS/bin/tansu)"
    )
    p.add_argument(
        "--groupcoord-arg", action="append", default=[], help="extra `groupcoord serve` argument"
    )
    p.add_argument("--no-pin", action="store_true", help="do not pin server and generator to cores")
    args = p.parse_args(argv)
    args.targets = [t for t in args.targets.split(",") if t]
    names = [n for n in args.only.split(",") if n] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        p.error(f"unknown scenario(s) {unknown}; known: {list(SCENARIOS)}")
    selected = [SCENARIOS[n] for n in names]

    fd_limit = servers.raise_fd_limit()
    avail = servers.cores()
    server_core = gen_core = None
    if not args.no_pin and len(avail) >= 2:
        server_core, gen_core = avail[0], avail[1]
        os.sched_setaffinity(0, {gen_core})
    ctx = Context(args.quick, server_core)
    if server_core is None:
        ctx.notes.append("server and generator NOT pinned (fewer than 2 cores or --no-pin)")
    if fd_limit < RSS_GROUPS * RSS_PER_GROUP + 100 and "rss" in names:
        ctx.notes.append(f"fd limit {fd_limit} may be too low for the rss scenario")

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        results = runner.run(run_all(args, ctx, selected))
    rows = build_rows(selected, results)
    print()
    print(
        f"groupcoord bench ({'quick' if args.quick else 'full'}); server on core {server_core}, "
        f"generator on core {gen_core}; {platform.python_implementation()} "
        f"{platform.python_version()}, uvloop {uvloop.__version__}"
    )
    for sc in selected:
        print(f"  {sc.name}: {sc.title}")
    tansu_rows = [r for r in rows if r["versus"] == "tansu"]
    kafka_rows = [r for r in rows if r["versus"] == "kafka"]
    if tansu_rows:
        print()
        print_table(tansu_rows)
        print(
            "null = the same heartbeat load against a do-nothing responder: the generator's "
            "ceiling."
        )
    if kafka_rows:
        print()
        print("groupcoord vs Kafka 4.4 (the same load generator, the same run; ratio = g/k)")
        print()
        print_table(kafka_rows, "kafka")
        for note in ctx.kafka_notes:
            print(f"kafka note: {note}")
    for note in ctx.notes:
        print(f"note: {note}")
    if args.out:
        out = {
            "quick": args.quick,
            "server_core": server_core,
            "generator_core": gen_core,
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "results": results,
            "rows": [{k: v for k, v in r.items() if not k.startswith("_")} for r in rows],
            "notes": ctx.notes,
            "kafka_notes": ctx.kafka_notes,
            "scenarios": {
                sc.name: {"title": sc.title, "metrics": [asdict(m) for m in sc.metrics]}
                for sc in selected
            },
        }
        Path(args.out).write_text(json.dumps(out, indent=2, default=str) + "\n")
        print(f"wrote {args.out}")
    return 0 if results else 2  # a benchmark reports; pass/fail is in the table, not the exit code


if __name__ == "__main__":
    sys.exit(main())

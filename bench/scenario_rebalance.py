"""Rebalance time, classic protocol vs the KIP-848 consumer protocol (issue 23), 100 and 1,000
members, on the same run.

Issue 23: "Bench: rebalance time for 100 and 1,000 members, classic vs consumer protocol, on the
same run."

Per size N, each protocol gets a fresh groupcoord and a topic of 2N partitions, and two rebalances
are timed:
- formation: N members send their first request in one burst; done when every member holds its
  share. Classic: every member's SyncGroup answered in the generation whose leader saw all N
  (the leader assigns partition k to its k-th member). Consumer: every member at the same member
  epoch, the partitions they were given adding up to all 2N (each member then holds its whole
  target: nothing pending revocation or unreleased, i.e. the group is Stable);
- one more member: a member joins the stable group of N; done when the N+1 members hold their
  shares again (classic: all N+1 synced in the new generation; consumer: all at one epoch, all
  partitions given). The members keep heartbeating meanwhile, as real clients do.
Both protocols beat at the same pace: classic members every STORM_BEAT_S (the join scenario's),
consumer members at the server's heartbeat interval, set to the same value
(`--consumer-heartbeat-interval-ms`); a consumer member answers an assignment at once (its ack),
as the Java client and librdkafka do. Members are raw-protocol (bench/wire.py), one connection
each, so the figures are the server's and the protocol's, not a client library's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench import loadgen, servers, wire
from bench.__main__ import STORM_BEAT_S, Context, Metric, register

SIZES = (100, 1000)
BEAT_MS = int(STORM_BEAT_S * 1000)
DEADLINE_S = 180.0
TOPIC = loadgen.TOPIC


def _metrics() -> list[Metric]:
    out = []
    for n in SIZES:
        for proto in ("classic", "consumer"):
            out.append(Metric(f"rb_{proto}_form_{n}", f"{n:,} members form, {proto}", "s"))
            out.append(Metric(f"rb_{proto}_join1_{n}", f"1 joins {n:,}, {proto}", "s"))
            out.append(Metric(f"rb_{proto}_cpu_{n}", f"  server CPU, both, {proto}", "s"))
    return out


class Settled:
    """A future set the first time `check()` holds after `arm()`; `at` is when (perf_counter)."""

    def __init__(self, check: Callable[[], bool]) -> None:
        self.check = check
        self.fut: asyncio.Future[float] | None = None

    def arm(self) -> asyncio.Future[float]:
        self.fut = asyncio.get_running_loop().create_future()
        return self.fut

    def poke(self) -> None:
        if self.fut is not None and not self.fut.done() and self.check():
            self.fut.set_result(time.perf_counter())


# ---- classic ------------------------------------------------------------------------------------


@dataclass
class Classic:
    group_id: str
    size: int
    synced: Counter[int] = field(default_factory=Counter)  # generation -> members synced in it
    full: set[int] = field(default_factory=set)  # generations whose leader saw `size` members

    def settled(self) -> bool:
        return any(self.synced[g] == self.size for g in self.full)


async def classic_member(m: loadgen.Member, g: Classic, done: Settled, stop: asyncio.Event) -> None:
    def on_joined(m: loadgen.Member, join: wire.JoinResponse) -> None:
        if m.is_leader and len(join.members) == g.size:
            g.full.add(join.generation_id)

    while not stop.is_set():
        await loadgen.join_and_sync(m, on_joined)
        g.synced[m.generation_id] += 1
        done.poke()
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), STORM_BEAT_S)
            if stop.is_set():
                return
            error = await loadgen.heartbeat_once(m)
            if error:
                g.synced[m.generation_id] -= 1
                if error == wire.UNKNOWN_MEMBER_ID:
                    m.member_id = ""
                break


async def run_classic(port: int, n: int) -> tuple[float, float]:
    g = Classic("rb-classic", n)

    def member(conn: Any, i: int, done: Settled, stop: asyncio.Event) -> Any:
        return classic_member(loadgen.Member(conn, g.group_id, i), g, done, stop)

    return await _form_then_join(port, n, g, member)


# ---- consumer -----------------------------------------------------------------------------------


@dataclass
class Consumer:
    group_id: str
    size: int
    partitions: int
    epochs: Counter[int] = field(default_factory=Counter)  # member epoch -> members at it
    held: int = 0  # partitions given, over all members

    def settled(self) -> bool:
        total = sum(self.epochs.values())
        return total == self.size and len(self.epochs) == 1 and self.held == self.partitions


async def consumer_member(
    conn: loadgen.Conn, g: Consumer, done: Settled, stop: asyncio.Event
) -> None:
    member_id, epoch, owned = "", 0, ()
    joined = False
    req = wire.consumer_group_heartbeat_v0(
        g.group_id, "", 0, rebalance_timeout_ms=60_000, topics=[TOPIC], owned=()
    )
    while not stop.is_set():
        body = await conn.request_flexible((wire.CONSUMER_GROUP_HEARTBEAT, 0, req))
        r = wire.decode_consumer_group_heartbeat_v0(body)
        if r.error_code:
            raise loadgen.ProtocolError(f"ConsumerGroupHeartbeat error {r.error_code}")
        if joined:
            g.epochs[epoch] -= 1
            if not g.epochs[epoch]:
                del g.epochs[epoch]
        joined = True
        member_id, epoch = r.member_id or member_id, r.member_epoch
        g.epochs[epoch] += 1
        acked = r.assignment is None or r.assignment == owned
        if r.assignment is not None:
            g.held += sum(len(ps) for _, ps in r.assignment) - sum(len(ps) for _, ps in owned)
            owned = r.assignment
        done.poke()
        req = wire.consumer_group_heartbeat_v0(g.group_id, member_id, epoch, owned=owned)
        if acked:  # nothing new to acknowledge: the next beat at the server's interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), r.heartbeat_interval_ms / 1000)
    if joined:  # leave, so the server's last figures are not of a session timing out
        leave = wire.consumer_group_heartbeat_v0(g.group_id, member_id, -1)
        await conn.request_flexible((wire.CONSUMER_GROUP_HEARTBEAT, 0, leave), timeout=10)


async def create_topic(port: int, partitions: int) -> None:
    conn = await loadgen.connect(servers.HOST, port)
    try:
        body = await conn.request(wire.create_topics_v2(TOPIC, partitions), timeout=30)
        error = wire.decode_create_topics_v2(body)
        if error not in (wire.NONE, 36):  # 36: TOPIC_ALREADY_EXISTS
            raise loadgen.ProtocolError(f"CreateTopics error {error}")
    finally:
        conn.close()


async def run_consumer(port: int, n: int, group_id: str = "rb-consumer") -> tuple[float, float]:
    g = Consumer(group_id, n, 2 * n)

    def member(conn: Any, i: int, done: Settled, stop: asyncio.Event) -> Any:
        return consumer_member(conn, g, done, stop)

    return await _form_then_join(port, n, g, member)


async def _form_then_join(
    port: int, n: int, g: Classic | Consumer, member: Callable[..., Any]
) -> tuple[float, float]:
    """(seconds for n members to form the group, seconds for one more to join it): `member`
    makes one member's coroutine from its connection."""
    conns = await loadgen.connect_many(servers.HOST, port, n + 1)
    stop = asyncio.Event()
    done = Settled(g.settled)
    tasks: list[asyncio.Task[None]] = []
    try:
        settled = done.arm()
        t0 = time.perf_counter()
        tasks = [asyncio.create_task(member(c, i, done, stop)) for i, c in enumerate(conns[:n])]
        form = await asyncio.wait_for(settled, DEADLINE_S) - t0
        g.size = n + 1
        settled = done.arm()
        t0 = time.perf_counter()
        tasks.append(asyncio.create_task(member(conns[n], n, done, stop)))
        join1 = await asyncio.wait_for(settled, DEADLINE_S) - t0
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        loadgen.close_all(conns)
    return form, join1


# ---- the scenario -------------------------------------------------------------------------------


@register(
    "rebalance",
    f"rebalance time, classic vs consumer protocol (KIP-848), {SIZES[0]} and {SIZES[1]:,} members",
    _metrics(),
    serverless=True,
)
async def rebalance(ctx: Context, server: None) -> dict[str, float]:
    args = ["--consumer-heartbeat-interval-ms", str(BEAT_MS)]
    out: dict[str, float] = {}
    for n in SIZES:
        for proto, run in (("classic", run_classic), ("consumer", run_consumer)):
            srv = servers.start_groupcoord(ctx.server_core, args)
            try:
                await create_topic(srv.port, 2 * n)
                cpu0 = srv.cpu_s()
                form, join1 = await run(srv.port, n)
                out[f"rb_{proto}_cpu_{n}"] = srv.cpu_s() - cpu0
            finally:
                srv.stop()
            out[f"rb_{proto}_form_{n}"] = form
            out[f"rb_{proto}_join1_{n}"] = join1
    ctx.notes.append(
        f"rebalance: both protocols beat every {BEAT_MS} ms (classic heartbeats; the consumer "
        "protocol's server heartbeat interval); a consumer member acks an assignment at once"
    )
    return out

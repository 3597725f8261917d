"""Rebalance time, classic protocol vs the KIP-848 consumer protocol (issues 23 and 38), on the
same run, plus the uniform assignor alone.

Per protocol and size, a fresh groupcoord and a topic of 2N partitions; the phases, each timed
from its first request until the group has settled again:
- form N (1,000 and 5,000): N members send their first request in one burst;
- at 1,000 only, on the same group in turn: one more member joins (join1); one member leaves
  (leave1); a 10% churn, 100 members leave while 100 new ones join (churn).
Settled means: classic, every member's SyncGroup answered in the generation whose leader saw
exactly the expected members (the leader assigns partition k to its k-th member); consumer,
every member at one member epoch, the partitions they were given adding up to all 2N (so
nothing is pending revocation or unreleased) and spread evenly (no two members' counts more than
one apart): the group is Stable at the target of all its members, not at an earlier one (while
members join, the earlier members' target may still be the one the first member got).
Both protocols beat at the same pace: classic members every STORM_BEAT_S (the join scenario's),
consumer members at the server's heartbeat interval, set to the same value
(`--consumer-heartbeat-interval-ms`); a consumer member answers an assignment at once (its ack),
as the Java client and librdkafka do. Members are raw-protocol (bench/wire.py), one connection
each, so the figures are the server's and the protocol's, not a client library's. The server
runs with its default assignment interval (`--consumer-assignment-interval-ms`).

The assignor alone: Kafka's uniform assignor on 10,000 members subscribed to 1,000 topics of 10
partitions (Kafka's own benchmark shape), first with no current assignment, then again after
one member joined the result (the sticky recomputation a join costs).
"""

from __future__ import annotations

import asyncio
import gc
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from bench import loadgen, servers, wire
from bench.__main__ import STORM_BEAT_S, Context, Goal, Metric, register

FORM_SIZES = (1000, 5000)
PHASE_SIZE = 1000  # join1, leave1 and churn run on the group of this size
CHURN = PHASE_SIZE // 10
BEAT_MS = int(STORM_BEAT_S * 1000)
DEADLINE_S = 180.0
TOPIC = loadgen.TOPIC
PROTOCOLS = ("classic", "consumer")
# The assignor alone: Kafka's uniform assignor benchmark shape.
ASSIGNOR_MEMBERS, ASSIGNOR_TOPICS, ASSIGNOR_PARTITIONS = 10_000, 1_000, 10

# issue 38's targets, consumer protocol, on an idle machine
_GOALS = {
    "rb_consumer_form_1000": Goal("<", 0.3),
    "rb_consumer_form_5000": Goal("<", 2.0),
    "rb_consumer_join1_1000": Goal("<", 0.2),
}


def _metrics() -> list[Metric]:
    out = []
    for proto in PROTOCOLS:
        for n in FORM_SIZES:
            key = f"rb_{proto}_form_{n}"
            out.append(Metric(key, f"{n:,} members form, {proto}", "s", _GOALS.get(key)))
        n = PHASE_SIZE
        key = f"rb_{proto}_join1_{n}"
        out.append(Metric(key, f"1 joins {n:,}, {proto}", "s", _GOALS.get(key)))
        out.append(Metric(f"rb_{proto}_leave1_{n}", f"1 leaves {n:,}, {proto}", "s"))
        out.append(Metric(f"rb_{proto}_churn_{n}", f"{CHURN} leave + {CHURN} join {n:,}, {proto}",
                          "s"))  # fmt: skip
        for n in FORM_SIZES:
            out.append(Metric(f"rb_{proto}_cpu_{n}", f"  server CPU, all phases at {n:,}, {proto}",
                              "s"))  # fmt: skip
    out.append(Metric("rb_assignor_10k", "uniform assignor alone, 10k x 10k partitions, CPU",
                      "ms", Goal("<", 100)))  # fmt: skip
    out.append(Metric("rb_assignor_10k_join1", "  the same, one member more, sticky", "ms"))
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
    seen: dict[int, int] = field(default_factory=dict)  # generation -> members its leader saw
    leaving: int = 0  # members told to leave that have not left yet

    def settled(self) -> bool:
        return not self.leaving and any(
            self.synced[g] == self.size for g, n in self.seen.items() if n == self.size
        )


class Nap:
    """A member's pause between beats, cut short for good by `wake` (its leave, or the crew's
    stop): one future and one timer a beat. The first way, asyncio.wait_for over two Event.wait
    tasks, cost the generator more per beat than the server spent answering a consumer beat
    (py-spy of both processes), and the generator, not the server, set the pace."""

    __slots__ = ("_fut", "woken")

    def __init__(self) -> None:
        self._fut: asyncio.Future[None] | None = None
        self.woken = False

    async def __call__(self, seconds: float) -> None:
        if self.woken:
            return
        loop = asyncio.get_running_loop()
        fut = self._fut = loop.create_future()
        timer = loop.call_later(seconds, _wake, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self._fut = None

    def wake(self) -> None:
        self.woken = True
        if self._fut is not None:
            _wake(self._fut)


def _wake(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def classic_member(
    m: loadgen.Member, g: Classic, done: Settled, stop: asyncio.Event, leave: asyncio.Event,
    nap: Nap,
) -> None:  # fmt: skip
    def on_joined(m: loadgen.Member, join: wire.JoinResponse) -> None:
        if m.is_leader:
            g.seen[join.generation_id] = len(join.members)

    while not (stop.is_set() or leave.is_set()):
        await loadgen.join_and_sync(m, on_joined)
        g.synced[m.generation_id] += 1
        done.poke()
        while True:
            await nap(STORM_BEAT_S)
            if stop.is_set():
                return
            if leave.is_set():
                g.synced[m.generation_id] -= 1
                g.leaving -= 1
                await m.conn.request(wire.leave_group_v3(g.group_id, [m.member_id]), timeout=10)
                return
            # No timeout per beat (the phase's deadline bounds a hang), as the consumer's.
            body = await m.conn.request_nowait(
                wire.heartbeat_v3(m.group_id, m.generation_id, m.member_id)
            )
            error = wire.decode_error_after_throttle(body)
            if error:
                g.synced[m.generation_id] -= 1
                if error == wire.UNKNOWN_MEMBER_ID:
                    m.member_id = ""
                break


# ---- consumer -----------------------------------------------------------------------------------


@dataclass
class Consumer:
    group_id: str
    size: int
    partitions: int
    epochs: Counter[int] = field(default_factory=Counter)  # member epoch -> members at it
    held: int = 0  # partitions given, over all members
    leaving: int = 0  # members told to leave that have not left yet
    sizes: Counter[int] = field(default_factory=Counter)  # partitions held -> members holding

    def settled(self) -> bool:
        total = sum(self.epochs.values())
        return (
            not self.leaving
            and total == self.size
            and len(self.epochs) == 1
            and self.held == self.partitions
            and max(self.sizes) - min(self.sizes) <= 1
        )

    def holds(self, before: int, after: int) -> None:
        """A member's count of partitions went from `before` to `after` (-1: not a member)."""
        if before >= 0:
            self.sizes[before] -= 1
            if not self.sizes[before]:
                del self.sizes[before]
        if after >= 0:
            self.sizes[after] += 1


def _count(owned: wire.Owned) -> int:
    return sum(len(ps) for _, ps in owned)


async def consumer_member(
    conn: loadgen.Conn, g: Consumer, done: Settled, stop: asyncio.Event, leave: asyncio.Event,
    nap: Nap,
) -> None:  # fmt: skip
    member_id, epoch, owned = "", 0, ()
    joined = False
    req = wire.consumer_group_heartbeat_v0(
        g.group_id, "", 0, rebalance_timeout_ms=60_000, topics=[TOPIC], owned=()
    )
    while not (stop.is_set() or leave.is_set()):
        body = await conn.request_flexible_nowait((wire.CONSUMER_GROUP_HEARTBEAT, 0, req))
        r = wire.decode_consumer_group_heartbeat_v0(body)
        if r.error_code:
            raise loadgen.ProtocolError(f"ConsumerGroupHeartbeat error {r.error_code}")
        changed = not joined or r.member_epoch != epoch or r.assignment is not None
        if joined:
            g.epochs[epoch] -= 1
            if not g.epochs[epoch]:
                del g.epochs[epoch]
        else:
            g.holds(-1, 0)
        joined = True
        member_id, epoch = r.member_id or member_id, r.member_epoch
        g.epochs[epoch] += 1
        acked = r.assignment is None or r.assignment == owned
        if r.assignment is not None:
            g.held += _count(r.assignment) - _count(owned)
            g.holds(_count(owned), _count(r.assignment))
            owned = r.assignment
        done.poke()
        if changed:  # a steady beat sends the same bytes again
            req = wire.consumer_group_heartbeat_v0(g.group_id, member_id, epoch, owned=owned)
        if acked:  # nothing new to acknowledge: the next beat at the server's interval
            await nap(r.heartbeat_interval_ms / 1000)
    if joined and leave.is_set() and not stop.is_set():
        g.epochs[epoch] -= 1
        if not g.epochs[epoch]:
            del g.epochs[epoch]
        g.held -= _count(owned)
        g.holds(_count(owned), -1)
        g.leaving -= 1
        bye = wire.consumer_group_heartbeat_v0(g.group_id, member_id, -1)
        await conn.request_flexible((wire.CONSUMER_GROUP_HEARTBEAT, 0, bye), timeout=10)


async def create_topic(port: int, partitions: int) -> None:
    conn = await loadgen.connect(servers.HOST, port)
    try:
        body = await conn.request(wire.create_topics_v2(TOPIC, partitions), timeout=30)
        error = wire.decode_create_topics_v2(body)
        if error not in (wire.NONE, 36):  # 36: TOPIC_ALREADY_EXISTS
            raise loadgen.ProtocolError(f"CreateTopics error {error}")
    finally:
        conn.close()


# ---- the phases ---------------------------------------------------------------------------------


class Crew:
    """The members of one group, each on its own connection with its own leave event."""

    def __init__(self, conns: list[Any], g: Classic | Consumer, proto: str) -> None:
        self.conns = conns
        self.g = g
        self.proto = proto
        self.done = Settled(g.settled)
        self.stop = asyncio.Event()
        self.leaves: dict[int, asyncio.Event] = {}
        self.naps: dict[int, Nap] = {}
        self.tasks: list[asyncio.Task[None]] = []

    def start(self, i: int) -> None:
        leave = self.leaves[i] = asyncio.Event()
        nap = self.naps[i] = Nap()
        conn, g = self.conns[i], self.g
        if isinstance(g, Classic):
            coro = classic_member(loadgen.Member(conn, g.group_id, i), g, self.done, self.stop,
                                  leave, nap)  # fmt: skip
        else:
            coro = consumer_member(conn, g, self.done, self.stop, leave, nap)
        self.tasks.append(asyncio.create_task(coro))

    async def phase(self, size: int, joining: range, leaving: list[int]) -> float:
        """Seconds from the phase's first request until the group of `size` settled."""
        self.g.size = size
        self.g.leaving = len(leaving)  # a leaver counts as gone only once it has left
        settled = self.done.arm()
        t0 = time.perf_counter()
        for i in leaving:
            self.leaves[i].set()
            self.naps[i].wake()
        for i in joining:
            self.start(i)
        return await asyncio.wait_for(settled, DEADLINE_S) - t0

    async def close(self) -> None:
        self.stop.set()
        for nap in self.naps.values():
            nap.wake()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        loadgen.close_all(self.conns)


async def run_phases(
    port: int, proto: str, n: int, prefix: str = "", phases: bool | None = None
) -> dict[str, float]:
    """Form a group of n; at PHASE_SIZE (or as `phases` says) also join1, leave1 and churn, in
    turn. `prefix` names the group apart (the Kafka comparison runs a warm-up pass first)."""
    phases = n == PHASE_SIZE if phases is None else phases
    extra = 1 + CHURN if phases else 0
    conns = await loadgen.connect_many(servers.HOST, port, n + extra)
    g: Classic | Consumer = (
        Classic(f"{prefix}rb-classic", n)
        if proto == "classic"
        else Consumer(f"{prefix}rb-consumer", n, 2 * n)
    )
    crew = Crew(conns, g, proto)
    out: dict[str, float] = {}
    try:
        out[f"rb_{proto}_form_{n}"] = await crew.phase(n, range(n), [])
        if phases:
            out[f"rb_{proto}_join1_{n}"] = await crew.phase(n + 1, range(n, n + 1), [])
            out[f"rb_{proto}_leave1_{n}"] = await crew.phase(n, range(0), [0])
            out[f"rb_{proto}_churn_{n}"] = await crew.phase(
                n, range(n + 1, n + 1 + CHURN), list(range(1, 1 + CHURN))
            )
    finally:
        await crew.close()
    return out


# ---- the assignor alone -------------------------------------------------------------------------


def assignor_alone() -> tuple[float, float]:
    """(ms to assign 10k members from scratch, ms to reassign after one more joined): the least
    CPU time of 3 runs each (process time: a loaded machine's waits are not the assignor's)."""
    from coordinator.core.consumer.assignors import GroupSpec, MemberSpec, UniformAssignor
    from coordinator.core.consumer.model import EMPTY_PARTITIONS, SubscriptionType

    topics = frozenset(uuid.UUID(int=(i + 1) << 64 | (i + 1)) for i in range(ASSIGNOR_TOPICS))
    counts = dict.fromkeys(topics, ASSIGNOR_PARTITIONS)

    def spec(n: int, current: dict[str, Any]) -> GroupSpec:
        members = {
            f"member-{i:05d}": MemberSpec(
                f"member-{i:05d}", None, None, topics, current.get(f"member-{i:05d}",
                                                                   EMPTY_PARTITIONS)
            )
            for i in range(n)
        }  # fmt: skip
        return GroupSpec(MappingProxyType(members), SubscriptionType.HOMOGENEOUS, counts)

    assignor = UniformAssignor()
    fresh = spec(ASSIGNOR_MEMBERS, {})
    # This process's own heap (thousands of connections' leftovers from the phases before) out
    # of the collector's way: full collections walking it landed on the assignor's clock (the
    # same assignor measured 19-142 ms in one process); the assignor's own garbage still counts.
    gc.collect()
    gc.freeze()
    times, result = [], {}
    for _ in range(3):
        t0 = time.process_time()
        result = assignor.assign(fresh)
        times.append(time.process_time() - t0)
    grown = spec(ASSIGNOR_MEMBERS + 1, result)
    again = []
    for _ in range(3):
        t0 = time.process_time()
        assignor.assign(grown)
        again.append(time.process_time() - t0)
    gc.unfreeze()
    return 1000 * min(times), 1000 * min(again)


# ---- the scenario -------------------------------------------------------------------------------


@register(
    "rebalance",
    f"rebalance time, classic vs consumer protocol (KIP-848), {FORM_SIZES[0]:,} and "
    f"{FORM_SIZES[1]:,} members; the assignor alone",
    _metrics(),
    serverless=True,
)
async def rebalance(ctx: Context, server: None) -> dict[str, float]:
    args = ["--consumer-heartbeat-interval-ms", str(BEAT_MS)]
    out: dict[str, float] = {}
    for n in FORM_SIZES:
        for proto in PROTOCOLS:
            srv = servers.start_groupcoord(ctx.server_core, args)
            try:
                await create_topic(srv.port, 2 * n)
                cpu0 = srv.cpu_s()
                out.update(await run_phases(srv.port, proto, n))
                out[f"rb_{proto}_cpu_{n}"] = srv.cpu_s() - cpu0
            finally:
                srv.stop()
    out["rb_assignor_10k"], out["rb_assignor_10k_join1"] = assignor_alone()
    ctx.notes.append(
        f"rebalance: both protocols beat every {BEAT_MS} ms (classic heartbeats; the consumer "
        "protocol's server heartbeat interval); a consumer member acks an assignment at once"
    )
    return out

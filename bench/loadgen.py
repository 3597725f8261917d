"""The raw-protocol load generator: connections, group members, and the measured workloads.

Design for a generator that costs less than the server it measures:
  * one `asyncio.Protocol` per connection on uvloop, no streams, no per-request coroutine on the hot
    path: a heartbeat response is parsed in `data_received` and the next request written from there;
  * heartbeat frames are pre-encoded per member (`wire.Template`); only the correlation id changes;
  * one connection per member, because a Kafka broker handles one request at a time per connection,
    so members sharing a connection would serialise behind each other (and a parked JoinGroup would
    block every other member on it).

Every wait is bounded: requests carry a timeout, setups a deadline, measured phases a duration.
"""

from __future__ import annotations

import asyncio
import gc
import resource
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from bench import wire

SESSION_TIMEOUT_MS = 60_000
REBALANCE_TIMEOUT_MS = 60_000
TOPIC = "bench"
METADATA = wire.subscription([TOPIC])
REQUEST_TIMEOUT_S = 90.0

now_ns = time.perf_counter_ns


class ProtocolError(Exception):
    pass


# A pending request: (correlation_id, future or None, member or None, scheduled_ns, sent_ns).
Pending = tuple[int, "asyncio.Future[bytes] | None", "Member | None", int, int]


class Conn(asyncio.Protocol):
    """One TCP connection; responses are matched FIFO and checked against the correlation id."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.pending: deque[Pending] = deque()
        self.next_id = 1
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        # Fast-path sink: called with (member, scheduled_ns, sent_ns, body) for heartbeats.
        self.on_fast: Callable[[Member, int, int, bytes], None] | None = None

    # -- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's isn't an asyncio.Transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)
        err = ConnectionError(f"connection lost: {exc}")
        while self.pending:
            fut = self.pending.popleft()[1]
            if fut is not None and not fut.done():
                fut.set_exception(err)

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        if not buf and len(data) >= 8 and int.from_bytes(data[:4]) + 4 == len(data):
            self._dispatch(int.from_bytes(data[4:8]), data[8:])  # the common case: one whole frame
            return
        buf += data
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            size = int.from_bytes(buf[pos : pos + 4])
            if end - pos - 4 < size:
                break
            self._dispatch(
                int.from_bytes(buf[pos + 4 : pos + 8]), bytes(buf[pos + 8 : pos + 4 + size])
            )
            pos += 4 + size
        del buf[:pos]

    def _dispatch(self, correlation_id: int, body: bytes) -> None:
        if not self.pending:
            raise ProtocolError(f"unsolicited response {correlation_id}")
        cid, fut, member, scheduled, sent = self.pending.popleft()
        if cid != correlation_id:
            raise ProtocolError(f"correlation id {correlation_id}, expected {cid}")
        if fut is None:
            assert self.on_fast is not None and member is not None
            self.on_fast(member, scheduled, sent, body)
        elif not fut.done():
            fut.set_result(body)

    # -- sending
    def _take_id(self) -> int:
        cid = self.next_id
        self.next_id = cid + 1 if cid < 0x7FFFFFFF else 1
        return cid

    async def request(
        self, req: tuple[int, int, bytes], timeout: float = REQUEST_TIMEOUT_S
    ) -> bytes:
        return await asyncio.wait_for(self.request_nowait(req), timeout)

    def request_nowait(self, req: tuple[int, int, bytes]) -> asyncio.Future[bytes]:
        assert self.transport is not None
        cid = self._take_id()
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.pending.append((cid, fut, None, 0, 0))
        self.transport.write(wire.frame(*req, cid))
        return fut

    async def request_flexible(
        self, req: tuple[int, int, bytes], timeout: float = REQUEST_TIMEOUT_S
    ) -> bytes:
        """A flexible-version request (header v2); the answer starts with the header's tags."""
        return await asyncio.wait_for(self.request_flexible_nowait(req), timeout)

    def request_flexible_nowait(self, req: tuple[int, int, bytes]) -> asyncio.Future[bytes]:
        """`request_flexible` without its own timeout (a caller bounds the whole exchange:
        wait_for's timer and callbacks per request are a good part of a generator's beat)."""
        assert self.transport is not None
        cid = self._take_id()
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.pending.append((cid, fut, None, 0, 0))
        self.transport.write(wire.flexible_frame(*req, cid))
        return fut

    def send_fast(self, template: wire.Template, member: Member, scheduled_ns: int) -> None:
        cid = self.next_id
        self.next_id = cid + 1 if cid < 0x7FFFFFFF else 1
        sent = now_ns()
        self.pending.append((cid, None, member, scheduled_ns or sent, sent))
        self.transport.write(template.head + cid.to_bytes(4) + template.tail)  # type: ignore[union-attr]

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


async def connect(host: str, port: int) -> Conn:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(Conn, host, port)
    body = await conn.request(wire.api_versions_v0(), timeout=30)
    error, _ = wire.decode_api_versions_v0(body)
    if error:
        raise ProtocolError(f"ApiVersions error {error}")
    return conn


async def connect_many(host: str, port: int, n: int, concurrency: int = 256) -> list[Conn]:
    """Open n connections, `concurrency` handshakes at a time (listen backlogs are small)."""
    conns: list[Conn] = []
    for start in range(0, n, concurrency):
        batch = min(concurrency, n - start)
        conns += await asyncio.gather(*(connect(host, port) for _ in range(batch)))
    return conns


def close_all(conns: list[Conn]) -> None:
    for c in conns:
        c.close()


# ---- group members ------------------------------------------------------------------------------


@dataclass(slots=True)
class Member:
    conn: Conn
    group_id: str
    index: int
    member_id: str = ""
    generation_id: int = -1
    is_leader: bool = False
    heartbeat: wire.Template | None = None
    last_join_sent_ns: int = 0

    def heartbeat_template(self) -> wire.Template:
        return wire.Template.of(
            *wire.heartbeat_v3(self.group_id, self.generation_id, self.member_id)
        )


@dataclass(slots=True)
class GroupTracker:
    """Knows when a group is stable: every member heartbeats OK in the generation that holds all."""

    size: int
    full_generation: int = -2
    ok: dict[int, int] = field(default_factory=dict)  # member index -> generation of last OK beat

    def stable(self) -> bool:
        return len(self.ok) == self.size and all(
            g == self.full_generation for g in self.ok.values()
        )


async def join_and_sync(
    m: Member,
    on_joined: Callable[[Member, wire.JoinResponse], None],
    first: wire.JoinResponse | None = None,
) -> int:
    """The classic consumer dance until SyncGroup succeeds; returns the size of the generation the
    leader saw (0 for followers). Handles MEMBER_ID_REQUIRED, fencing, and rebalances mid-sync.
    `first` is a JoinGroup answer already received (the join storm sends its first join itself)."""
    for _ in range(1000):
        if first is not None:
            join, first = first, None
        else:
            m.last_join_sent_ns = now_ns()
            body = await m.conn.request(
                wire.join_group_v5(
                    m.group_id, m.member_id, METADATA, SESSION_TIMEOUT_MS, REBALANCE_TIMEOUT_MS
                )
            )
            join = wire.decode_join_v5(body)
        if join.error_code == wire.MEMBER_ID_REQUIRED:
            m.member_id = join.member_id
            continue
        if join.error_code == wire.UNKNOWN_MEMBER_ID:
            m.member_id = ""
            continue
        if join.error_code == wire.REBALANCE_IN_PROGRESS:
            continue
        if join.error_code:
            raise ProtocolError(f"JoinGroup error {join.error_code} for {m.group_id}")
        m.member_id = join.member_id
        m.generation_id = join.generation_id
        m.is_leader = join.leader == join.member_id
        on_joined(m, join)
        assignments = []
        if m.is_leader:
            assignments = [(mid, wire.assignment(TOPIC, [k])) for k, mid in enumerate(join.members)]
        body = await m.conn.request(
            wire.sync_group_v3(m.group_id, m.generation_id, m.member_id, assignments)
        )
        error, _ = wire.decode_sync_v3(body)
        if error in (wire.REBALANCE_IN_PROGRESS, wire.ILLEGAL_GENERATION):
            continue
        if error == wire.UNKNOWN_MEMBER_ID:
            m.member_id = ""
            continue
        if error:
            raise ProtocolError(f"SyncGroup error {error} for {m.group_id}")
        m.heartbeat = m.heartbeat_template()
        return len(join.members) if m.is_leader else 0
    raise ProtocolError("member never settled")


async def heartbeat_once(m: Member) -> int:
    body = await m.conn.request(wire.heartbeat_v3(m.group_id, m.generation_id, m.member_id))
    return wire.decode_error_after_throttle(body)


async def form_groups(
    conns: list[Conn],
    groups: int,
    per_group: int,
    deadline_s: float,
    beat_s: float | None = None,
    prefix: str = "bench",
) -> list[Member]:
    """Join `groups` x `per_group` members (member k on conns[k]) into groups `{prefix}-{g}` and
    return once every group is stable: all members beating OK in the generation whose leader saw
    the whole group."""
    if beat_s is None:
        beat_s = max(0.2, groups * per_group / 5_000)  # keep setup beats near 5k/s
    members = [
        Member(conns[g * per_group + i], f"{prefix}-{g}", i)
        for g in range(groups)
        for i in range(per_group)
    ]
    trackers = {f"{prefix}-{g}": GroupTracker(per_group) for g in range(groups)}
    unstable = set(trackers)

    def on_joined(m: Member, join: wire.JoinResponse) -> None:
        t = trackers[m.group_id]
        t.ok.pop(m.index, None)
        if m.is_leader and len(join.members) == t.size:
            t.full_generation = max(t.full_generation, join.generation_id)

    async def run(m: Member) -> None:
        t = trackers[m.group_id]
        await join_and_sync(m, on_joined)
        while unstable:
            error = await heartbeat_once(m)
            if error == wire.NONE:
                t.ok[m.index] = m.generation_id
                if m.group_id in unstable and t.stable():
                    unstable.discard(m.group_id)
            else:
                t.ok.pop(m.index, None)
                if error == wire.UNKNOWN_MEMBER_ID:
                    m.member_id = ""
                elif error not in (wire.REBALANCE_IN_PROGRESS, wire.ILLEGAL_GENERATION):
                    raise ProtocolError(f"Heartbeat error {error} in setup")
                await join_and_sync(m, on_joined)
                continue
            if unstable:
                await asyncio.sleep(beat_s)

    await asyncio.wait_for(asyncio.gather(*(run(m) for m in members)), deadline_s)
    return members


def fixed_members(conns: list[Conn], per_group: int) -> list[Member]:
    """Members with made-up ids and generation 1, for the null responder (no real groups)."""
    members = []
    for k, c in enumerate(conns):
        m = Member(c, f"bench-{k // per_group}", k % per_group, f"member-{k}", 1)
        m.heartbeat = m.heartbeat_template()
        members.append(m)
    return members


async def leave_all(members: list[Member], timeout_s: float = 30) -> None:
    async def leave(m: Member) -> None:
        await m.conn.request(wire.leave_group_v3(m.group_id, [m.member_id]), timeout=timeout_s)

    await asyncio.wait_for(
        asyncio.gather(*(leave(m) for m in members), return_exceptions=True), timeout_s
    )


# ---- measured heartbeat workloads ---------------------------------------------------------------


@dataclass(slots=True)
class LatencyStats:
    count: int
    errors: int
    seconds: float
    latencies_ns: list[int]
    generator_cpu_s: float
    server_cpu_s: float
    send_lag_ns: list[int] = field(default_factory=list)
    received: int = -1  # responses that arrived inside the window (open loop); -1: same as count

    @property
    def rate(self) -> float:
        n = self.count if self.received < 0 else self.received
        return n / self.seconds if self.seconds else 0.0

    def pct(self, p: float, data: list[int] | None = None) -> float:
        """Percentile in milliseconds (nearest rank)."""
        xs = self.latencies_ns if data is None else data
        if not xs:
            return float("nan")
        k = min(len(xs) - 1, max(0, round(p / 100 * len(xs)) - 1))
        return xs[k] / 1e6


class _NoGC:
    """No cyclic GC pauses inside a measured phase (the generator's own stalls would show up as
    server latency); everything allocated so far is frozen out of later collections."""

    def __enter__(self) -> None:
        gc.collect()
        gc.freeze()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        gc.enable()
        gc.unfreeze()


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


async def _drain(members: list[Member], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while any(m.conn.pending for m in members) and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


async def closed_loop(
    members: list[Member], warmup_s: float, measure_s: float, server_cpu: Callable[[], float]
) -> LatencyStats:
    with _NoGC():
        return await _closed_loop(members, warmup_s, measure_s, server_cpu)


async def _closed_loop(
    members: list[Member], warmup_s: float, measure_s: float, server_cpu: Callable[[], float]
) -> LatencyStats:
    """Every member heartbeats back to back: one in flight per connection."""
    lat: list[int] = []
    state = {"running": True, "errors": 0, "count": 0}
    t_start = now_ns() + int(warmup_s * 1e9)
    t_end = t_start + int(measure_s * 1e9)

    def on_fast(m: Member, scheduled: int, sent: int, body: bytes) -> None:
        t = now_ns()
        if t_start <= sent and t <= t_end:
            lat.append(t - sent)
            if body[5] or body[4]:
                state["errors"] += 1
        if state["running"]:
            m.conn.send_fast(m.heartbeat, m, 0)  # type: ignore[arg-type]

    for m in members:
        m.conn.on_fast = on_fast
    for m in members:
        m.conn.send_fast(m.heartbeat, m, 0)  # type: ignore[arg-type]
    await asyncio.sleep(warmup_s)
    cpu0, scpu0 = _cpu_s(), server_cpu()
    await asyncio.sleep(measure_s)
    cpu1, scpu1 = _cpu_s(), server_cpu()
    state["running"] = False
    await _drain(members, 10)
    lat.sort()
    return LatencyStats(len(lat), state["errors"], measure_s, lat, cpu1 - cpu0, scpu1 - scpu0)


async def open_loop(
    members: list[Member],
    rate: float,
    warmup_s: float,
    measure_s: float,
    server_cpu: Callable[[], float],
) -> LatencyStats:
    with _NoGC():
        return await _open_loop(members, rate, warmup_s, measure_s, server_cpu)


async def _open_loop(
    members: list[Member],
    rate: float,
    warmup_s: float,
    measure_s: float,
    server_cpu: Callable[[], float],
) -> LatencyStats:
    """Heartbeats at a fixed aggregate rate, member i at offsets i, i+n, ...; latency is measured
    from the *scheduled* send time, so a stalled server cannot hide queueing (no coordinated
    omission). Requests may pipeline on a connection if the previous one is still out."""
    lat: list[int] = []
    lag: list[int] = []
    errors = [0]
    interval_ns = 1e9 / rate
    total = int(rate * (warmup_s + measure_s))
    t0 = now_ns() + 10_000_000
    t_start = t0 + int(warmup_s * 1e9)
    t_end = t_start + int(measure_s * 1e9)

    received = [0]

    def on_fast(m: Member, scheduled: int, sent: int, body: bytes) -> None:
        t = now_ns()
        if t_start <= t < t_end:
            received[0] += 1
        if scheduled >= t_start and scheduled < t_end:
            lat.append(t - scheduled)
            lag.append(sent - scheduled)
            if body[5] or body[4]:
                errors[0] += 1

    for m in members:
        m.conn.on_fast = on_fast
    n = len(members)
    i = 0
    cpu0, scpu0 = _cpu_s(), server_cpu()
    measuring = False
    while i < total:
        t = now_ns()
        due = min(int((t - t0) / interval_ns) + 1, total)
        while i < due:
            m = members[i % n]
            m.conn.send_fast(m.heartbeat, m, t0 + int(i * interval_ns))  # type: ignore[arg-type]
            i += 1
        if not measuring and t >= t_start:
            measuring, cpu0, scpu0 = True, _cpu_s(), server_cpu()
        # Spin through the loop (sleep(0) still polls I/O): the generator owns its core, and a
        # 1 ms timer tick would add up to 1 ms of scheduling error to every latency.
        await asyncio.sleep(0)
    cpu1, scpu1 = _cpu_s(), server_cpu()
    await _drain(members, 10)
    lat.sort()
    lag.sort()
    stats = LatencyStats(len(lat), errors[0], measure_s, lat, cpu1 - cpu0, scpu1 - scpu0, lag)
    stats.received = received[0]
    return stats


# ---- join storm ---------------------------------------------------------------------------------


@dataclass(slots=True)
class StormResult:
    seconds: float  # last first-JoinGroup sent -> leader's SyncGroup answered (full generation)
    all_synced_s: float  # same start -> every member's SyncGroup answered in that generation
    generations: int


async def join_storm(
    conns: list[Conn], group_id: str, beat_s: float, deadline_s: float
) -> StormResult:
    """All members send their first JoinGroup in one burst. Members that settle in an early, partial
    generation heartbeat every `beat_s` to learn of the next rebalance, as real consumers do."""
    n = len(conns)
    members = [Member(c, group_id, i) for i, c in enumerate(conns)]
    done = asyncio.get_running_loop().create_future()
    gens: set[int] = set()
    synced_full: dict[int, int] = {}
    full_gen = [-1]
    leader_synced_ns = [0]

    def on_joined(m: Member, join: wire.JoinResponse) -> None:
        gens.add(join.generation_id)
        if m.is_leader and len(join.members) == n:
            full_gen[0] = join.generation_id

    async def run(m: Member, first: asyncio.Future[bytes]) -> None:
        join: wire.JoinResponse | None = wire.decode_join_v5(
            await asyncio.wait_for(first, REQUEST_TIMEOUT_S)
        )
        while not done.done():
            size = await join_and_sync(m, on_joined, join)
            join = None
            if m.generation_id == full_gen[0]:
                t = now_ns()
                synced_full[m.index] = t
                if size == n:
                    leader_synced_ns[0] = t
                if len(synced_full) == n and leader_synced_ns[0] and not done.done():
                    done.set_result(None)
            while not done.done():
                await asyncio.wait({done}, timeout=beat_s)
                if done.done() or m.generation_id == full_gen[0]:
                    # Synced into the generation that holds everyone: nothing left to learn, and
                    # its beats would only load the server while the others still sync.
                    continue
                error = await heartbeat_once(m)
                if error:
                    synced_full.pop(m.index, None)
                    if error == wire.UNKNOWN_MEMBER_ID:
                        m.member_id = ""
                    break

    req = wire.join_group_v5(group_id, "", METADATA, SESSION_TIMEOUT_MS, REBALANCE_TIMEOUT_MS)
    firsts = [m.conn.request_nowait(req) for m in members]
    t_last_join = now_ns()
    tasks = [asyncio.ensure_future(run(m, f)) for m, f in zip(members, firsts, strict=True)]
    try:
        await asyncio.wait_for(asyncio.shield(done), deadline_s)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    last_synced = max(synced_full.values())
    return StormResult(
        (leader_synced_ns[0] - t_last_join) / 1e9,
        (last_synced - t_last_join) / 1e9,
        len(gens),
    )

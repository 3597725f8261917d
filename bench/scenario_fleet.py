"""Sidecar fleet (issue 21): a 3-member fleet vs one sidecar with a local log, and kill -9 failover.

Issue 21's bench: "commits/s and heartbeat p99 through a 3-member fleet vs one sidecar with a local
log, in the same run; failover time (kill -> group answers again) as a distribution over >= 20 kill
rounds". Targets (issue 21, "Failover"): the groups answer again within 15 s of a kill -9 with
default settings; zero acknowledged commits lost.

One tansu (memory storage) for the whole run, started here, with the servers on the bench's server
core (one core for everything server-side, as in the other scenarios: both setups get the same CPU
budget, so the fleet's rows show its whole cost, forwarding and upstream writes included).

1. Load, the same raw-protocol load against each setup (the local sidecar first, then the fleet):
   - commits: COMMITTERS simple committers (OffsetCommit v7, generation -1, 1 partition, each its
     own connection and group; bench/scenario_storage's closed loop: one commit in flight each)
     for a fixed window: commits/s and the p99 of a commit under that load;
   - heartbeats: HB_GROUPS x HB_PER_GROUP members (bench/loadgen: one connection each), then an
     open loop at HB_RATE/s, latency from the scheduled send (no coordinated omission): p99;
     then HB_FAST_RATE/s (issue 37's bar: p99 <= 1 ms) from only the members connected to a
     member that does not own their group (the local sidecar: all), so every one is forwarded.
   Against the fleet, connection k goes to member k % 3, as a pod's clients bootstrap at their own
   sidecar: every heartbeat group has members on all three, and committer k's group is chosen
   (from the members' /fleet documents) to be owned by member (k // 3) % 3, so every member owns
   as many commit groups as the others and 2/3 of all requests reach a member that does not own
   the group and forward it to the owner. The shares actually forwarded are reported. The local
   sidecar keeps its log in a temporary directory with the default fsync=always.
2. Failover, FAILOVER_ROUNDS rounds (--quick: fewer) on the same fleet: pick the owner of a fresh
   group (the member whose /fleet says "serving" for partition_for(group, 50)) as the victim and
   GROUPS_PER_ROUND groups it owns; one committer per group, each on a survivor (the two survivors
   alternate), commits rising offsets one at a time (every commit forwarded to the victim). Once
   each has acknowledged commits, kill -9 the victim. Each committer then asks OffsetFetch until
   its group answers: the offset it fetches must be >= the last commit it saw acknowledged (else
   a lost acknowledged commit), then commits again until one is acknowledged: the failover time is
   kill -> that acknowledgement (the round's time is its slowest group). Meanwhile the survivors'
   /fleet is polled: kill -> all 50 state partitions served once again. Then a replacement member
   is started and the round ends when the three serve all 50 partitions once, each some (start ->
   that is reported too).

Default fleet settings throughout (--fleet-session-timeout-ms 4000). A failover is mostly the
upstream's consumer group at work: the session timeout running out, then the survivors' rejoin and
sync; loading a partition takes well under 0.1 s here. 20 rounds of about 11 s (kill -> answers,
then the replacement's start and join) make the full run 4-4.5 minutes; --quick under a minute.
The same rounds (`failovers`) run in front of Apache Kafka in bench/scenario_kafka.py's
`fleet_kafka`, with issue 37's goals (p50 <= 1.5 s, max <= 3 s): tansu's consumer group waits in
its join phase, Kafka's rebalances as soon as the survivors remove the dead member.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from bench import loadgen, servers, wire
from bench.__main__ import Context, Goal, Metric, register
from bench.scenario_observability import metrics_port
from bench.scenario_storage import TOPIC as COMMIT_TOPIC
from bench.scenario_storage import (
    Committer,
    commit_errors,
    offset_commit_v7,
    offset_fetch_v2,
)
from bench.scenario_storage import closed_loop as commit_closed_loop
from coordinator.sidecar.state_topic import partition_for

FLEET_SIZE = 3
STATE_PARTITIONS = 50  # `--state-topic-partitions` default
COMMITTERS = 36  # a multiple of 9: every (member reached, owner) pair equally often
HB_GROUPS, HB_PER_GROUP = 30, 10
HB_RATE = 3_000  # heartbeats/s, open loop
HB_FAST_RATE = 20_000  # heartbeats/s, open loop, through non-owners only (issue 37's bar: p99 1 ms)
FAILOVER_ROUNDS, QUICK_FAILOVER_ROUNDS = 20, 3
GROUPS_PER_ROUND = 2
FAILOVER_TARGET_S = 15.0  # issue 21
REQUEST_TIMEOUT_S = 5.0
RETRY_S = 0.02  # between answers NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
SETTLE_TIMEOUT_S = 60.0


# ---- processes ----------------------------------------------------------------------------------


@dataclass
class Member:
    """A fleet member (or the local sidecar): the server, its /fleet port, its fleet listener."""

    server: servers.Server
    http_port: int
    fleet_port: int | None = None
    killed: bool = False

    @property
    def port(self) -> int:
        return self.server.port

    def kill9(self) -> None:
        os.killpg(self.server.proc.pid, signal.SIGKILL)
        self.killed = True

    def stop(self) -> None:
        self.server.stop()


def start_member(ctx: Context, upstream: int, *extra: str) -> Member:
    fleet_port = servers.free_port()
    args = ["--upstream", f"{servers.HOST}:{upstream}"]
    args += list(extra) or ["--fleet-listen", f"{servers.HOST}:{fleet_port}"]
    server = servers.start_groupcoord(ctx.server_core, args)
    http = metrics_port(server)
    assert http is not None
    return Member(server, http, None if extra else fleet_port)


def create_topic(tansu_port: int, name: str, partitions: int) -> None:
    path = servers.tansu_path()
    assert path is not None
    subprocess.run(
        [str(path), "topic", "create", name, "--partitions", str(partitions),
         "--broker", f"tcp://{servers.HOST}:{tansu_port}"],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip


# ---- /fleet -------------------------------------------------------------------------------------


async def http_get(port: int, path: str, timeout_s: float = 5.0) -> bytes:
    reader, writer = await asyncio.wait_for(asyncio.open_connection(servers.HOST, port), timeout_s)
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n".encode())
        data = await asyncio.wait_for(reader.read(), timeout_s)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"{path} answered {head[:60]!r}")
    return body


async def serving(m: Member) -> set[int]:
    """The state partitions `m` serves now (empty if it does not answer)."""
    try:
        doc: dict[str, Any] = json.loads(await http_get(m.http_port, "/fleet"))
    except (OSError, RuntimeError, TimeoutError, ValueError):
        return set()
    return {p["partition"] for p in doc["partitions"] if p["status"] == "serving"}


async def ownership(members: list[Member]) -> list[set[int]]:
    return list(await asyncio.gather(*(serving(m) for m in members)))


def served_once(owned: list[set[int]]) -> bool:
    """Every state partition served by exactly one member, and every member serving some (a member
    that just joined has its share: the fleet has rebalanced)."""
    return (
        all(owned)
        and sum(map(len, owned)) == STATE_PARTITIONS
        and set().union(*owned) == set(range(STATE_PARTITIONS))
    )


async def settle(members: list[Member], timeout_s: float = SETTLE_TIMEOUT_S) -> float:
    """Seconds until the members serve all state partitions, each exactly once, each member some."""
    t0 = time.monotonic()
    while not served_once(await ownership(members)):
        if time.monotonic() - t0 > timeout_s:
            raise TimeoutError(f"fleet not settled in {timeout_s:.0f}s: {await describe(members)}")
        for m in members:
            if m.server.proc.poll() is not None:
                raise RuntimeError(f"member on {m.port} died:\n{m.server.log_tail(30)}")
        await asyncio.sleep(0.1)
    return time.monotonic() - t0


async def describe(members: list[Member]) -> str:
    owned = await ownership(members)
    return "; ".join(f"{m.port}: {len(o)} serving" for m, o in zip(members, owned, strict=True))


def owner_index(group: str, owned: list[set[int]]) -> int | None:
    p = partition_for(group, STATE_PARTITIONS)
    owners = [i for i, o in enumerate(owned) if p in o]
    return owners[0] if len(owners) == 1 else None


def forwarded_share(groups_and_members: list[tuple[str, int]], owned: list[set[int]]) -> float:
    """Of (group, member the request reaches), the share whose group another member owns."""
    remote = sum(owner_index(g, owned) != i for g, i in groups_and_members)
    return 100 * remote / max(len(groups_and_members), 1)


# ---- OffsetCommit / OffsetFetch one at a time ---------------------------------------------------


def fetched_offset(body: bytes) -> tuple[int, int]:
    """(error, committed offset of partition 0) of a one-partition OffsetFetch v2 response."""
    r = wire.Reader(body)
    offset, error = -1, 0
    for _ in range(r.i32()):
        r.string()
        for _ in range(r.i32()):
            r.i32()
            offset = int.from_bytes(r.buf[r.pos : r.pos + 8], signed=True)
            r.pos += 8
            r.string()
            error = r.i16() or error
    return (r.i16() or error), offset


async def wait_topic(ports: list[int], deadline_s: float = 30.0) -> None:
    """Until every server knows the commit topic (sidecars read upstream metadata periodically)."""
    deadline = time.monotonic() + deadline_s
    for port in ports:
        conn = await loadgen.connect(servers.HOST, port)
        try:
            while True:
                body = await conn.request(offset_commit_v7("bench-topic-probe", range(1), 0))
                if not commit_errors(body):
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"commits via {port} still fail (topic unknown?)")
                await asyncio.sleep(0.2)
        finally:
            conn.close()


# ---- 1. commits and heartbeats ------------------------------------------------------------------


def commit_groups(tag: str, owned: list[set[int]] | None) -> list[str]:
    """Committer k's group. In a fleet (k reaches member k % n), one owned by member (k // n) % n:
    each member owns as many as the others, and 1/n of the commits reach the owner directly."""
    if owned is None:
        return [f"fleet-commit-{tag}-{k}" for k in range(COMMITTERS)]
    n = len(owned)
    names = (f"fleet-commit-{tag}-{j}" for j in itertools.count())
    by_owner: dict[int | None, list[str]] = {}
    while any(len(by_owner.get(i, [])) < COMMITTERS for i in range(n)):
        g = next(names)
        by_owner.setdefault(owner_index(g, owned), []).append(g)
    return [by_owner[(k // n) % n][k] for k in range(COMMITTERS)]


async def commit_phase(
    ports: list[int], tag: str, warmup: float, measure: float, owned: list[set[int]] | None
) -> tuple[dict[str, float], list[tuple[str, int]]]:
    conns = [await loadgen.connect(servers.HOST, ports[k % len(ports)]) for k in range(COMMITTERS)]
    groups = commit_groups(tag, owned)
    try:
        committers = [
            Committer(c, wire.Template.of(*offset_commit_v7(g, range(1), k)))
            for k, (c, g) in enumerate(zip(conns, groups, strict=True))
        ]
        # Create each group with a first commit outside the window (and find the topic known).
        for k, c in enumerate(committers):
            body = await c.conn.request(offset_commit_v7(groups[k], range(1), 0))
            if commit_errors(body):
                raise RuntimeError(f"first commit of {groups[k]} failed ({tag})")
        with loadgen._NoGC():
            phase = await commit_closed_loop(committers, warmup, measure, None)
    finally:
        loadgen.close_all(conns)
    out = {
        "commit_rate": phase.received / phase.seconds,
        "commit_p50": phase.pct(50),
        "commit_p99": phase.pct(99),
        "commit_errors": float(phase.errors),
    }
    return out, [(g, k % len(ports)) for k, g in enumerate(groups)]


async def heartbeat_phase(
    ports: list[int], warmup: float, measure: float, cpu_s: Any, owned: list[set[int]] | None
) -> tuple[dict[str, float], list[tuple[str, int]]]:
    """HB_RATE/s over every member, then HB_FAST_RATE/s over the members whose group another
    member owns (every member of a local sidecar): each of those heartbeats is forwarded."""
    n = HB_GROUPS * HB_PER_GROUP
    conns = [await loadgen.connect(servers.HOST, ports[k % len(ports)]) for k in range(n)]
    try:
        members = await loadgen.form_groups(conns, HB_GROUPS, HB_PER_GROUP, deadline_s=120)
        await asyncio.sleep(0.3)
        opened = await loadgen.open_loop(members, HB_RATE, warmup, measure, cpu_s)
        remote = [
            m
            for k, m in enumerate(members)
            if owned is None or owner_index(m.group_id, owned) != k % len(ports)
        ]
        await asyncio.sleep(0.3)
        fast = await loadgen.open_loop(remote, HB_FAST_RATE, warmup, measure, cpu_s)
        await loadgen.leave_all(members)
    finally:
        loadgen.close_all(conns)
    out = {
        "hb_rate": opened.rate,
        "hb_p50": opened.pct(50),
        "hb_p99": opened.pct(99),
        "hb_p999": opened.pct(99.9),
        "hb_errors": float(opened.errors + fast.errors),
        "hb_fast_rate": fast.rate,
        "hb_fast_p99": fast.pct(99),
        "hb_fast_cpu": 100 * fast.server_cpu_s / measure,
        # per heartbeat answered: less at the mercy of the machine's load than p99 or the rate
        "hb_fast_cpu_us": 1e6 * fast.server_cpu_s / max(fast.rate * fast.seconds, 1),
    }
    return out, [(m.group_id, k % len(ports)) for k, m in enumerate(members)]


async def load_phases(
    ctx: Context,
    members: list[Member],
    upstream: servers.Server,
    tag: str,
    owned: list[set[int]] | None,
) -> dict[str, float]:
    warmup, measure = (0.5, 2.0) if ctx.quick else (1.0, 4.0)
    ports = [m.port for m in members]

    def cpu_s() -> float:
        return sum(m.server.cpu_s() for m in members if m.server.proc.poll() is None)

    c0, u0 = cpu_s(), upstream.cpu_s()
    commits, commit_targets = await commit_phase(ports, tag, warmup, measure, owned)
    commit_cpu, upstream_cpu = cpu_s() - c0, upstream.cpu_s() - u0
    beats, hb_targets = await heartbeat_phase(ports, warmup, measure, cpu_s, owned)
    out = {f"{tag}_{k}": v for k, v in (commits | beats).items()}
    # CPU of the groupcoord processes (and of tansu) over the whole commit phase, per commit made
    # in it (the warm-up's commits estimated at the measured rate; plus each group's first):
    # the cost of forwarding and of the upstream writes.
    measured = max(commits["commit_rate"] * (warmup + measure) + COMMITTERS, 1)
    out[f"{tag}_commit_cpu_us"] = 1e6 * commit_cpu / measured
    out[f"{tag}_commit_tansu_cpu_us"] = 1e6 * upstream_cpu / measured
    if owned is not None:
        out[f"{tag}_commit_forwarded_pct"] = forwarded_share(commit_targets, owned)
        out[f"{tag}_hb_forwarded_pct"] = forwarded_share(hb_targets, owned)
    return out


# ---- 2. failover --------------------------------------------------------------------------------


@dataclass
class FailoverCommitter:
    """Commits rising offsets for one group through one survivor, one commit at a time; after the
    kill, OffsetFetch until the group answers (the lost-commit check), then commits until one is
    acknowledged again."""

    port: int
    group: str
    killed: asyncio.Event
    acked: int = -1
    acks: int = 0
    next: int = 0
    fetched: int | None = None
    acked_before: int = -1  # the last commit acknowledged before the group answered again
    answered_at: float = 0.0  # monotonic: the first OffsetFetch answered after the kill
    recovered_at: float = 0.0  # monotonic: the first commit acknowledged after the kill
    retries: int = 0  # NOT_COORDINATOR / LOAD_IN_PROGRESS / other errors after the kill
    timeouts: int = 0
    errors_before: int = 0  # errors before the kill (there should be none)
    codes: dict[int, int] = field(default_factory=dict)  # error code -> count, after the kill
    codes_before: dict[int, int] = field(default_factory=dict)  # ... before (-1: no answer)
    conn: loadgen.Conn | None = None

    async def _call(self, req: tuple[int, int, bytes]) -> bytes | None:
        try:
            if self.conn is None:
                self.conn = await loadgen.connect(servers.HOST, self.port)
            return await self.conn.request(req, timeout=REQUEST_TIMEOUT_S)
        except (OSError, ConnectionError, TimeoutError, loadgen.ProtocolError) as e:
            self.timeouts += isinstance(e, TimeoutError)
            if self.conn is not None:
                self.conn.close()
            self.conn = None
            await asyncio.sleep(RETRY_S)
            return None

    async def _commit(self) -> int:
        self.next += 1
        body = await self._call(offset_commit_v7(self.group, range(1), self.next))
        if body is None:
            return -1
        code = _commit_code(body)
        if code == 0:
            self.acked = max(self.acked, self.next)
            self.acks += 1
        return code

    async def run(self) -> None:
        try:
            while not self.killed.is_set():
                code = await self._commit()
                if code != 0 and self.killed.is_set():  # in flight at the kill: counts after it
                    self.codes[code] = self.codes.get(code, 0) + 1
                    self.retries += 1
                elif code != 0:
                    self.errors_before += 1
                    self.codes_before[code] = self.codes_before.get(code, 0) + 1
                    await asyncio.sleep(RETRY_S)
            while True:
                body = await self._call(offset_fetch_v2(self.group))
                error, offset = (-1, -1) if body is None else fetched_offset(body)
                if error == 0:
                    self.fetched, self.answered_at = offset, time.monotonic()
                    self.acked_before = self.acked
                    break
                self.codes[error] = self.codes.get(error, 0) + 1
                self.retries += 1
                await asyncio.sleep(RETRY_S)
            while True:
                code = await self._commit()
                if code == 0:
                    self.recovered_at = time.monotonic()
                    break
                self.codes[code] = self.codes.get(code, 0) + 1
                self.retries += 1
                await asyncio.sleep(RETRY_S)
        finally:
            if self.conn is not None:
                self.conn.close()


def _commit_code(body: bytes) -> int:
    r = wire.Reader(body)
    r.i32()
    r.i32()
    r.string()
    r.i32()
    r.i32()
    return r.i16()


@dataclass
class Round:
    failover_s: float
    answered_s: float
    settled_s: float
    rejoin_s: float
    lost: int
    retries: int
    timeouts: int
    errors_before: int
    codes: dict[int, int]  # error code -> count after the kill (-1: no answer / link failed)
    codes_before: dict[int, int]


async def failover_round(
    ctx: Context, fleet: list[Member], upstream: int, r: int, graveyard: list[str]
) -> Round:
    """One kill round; `fleet` (changed in place) is the fleet after it: survivors + replacement."""
    owned = await ownership(fleet)
    first = next(
        (g for k in range(1000) if owner_index(g := f"failover-{r}-{k}", owned) is not None), None
    )
    assert first is not None, await describe(fleet)
    victim_i = owner_index(first, owned)
    assert victim_i is not None
    groups = [g for k in range(10_000) if owner_index(g := f"failover-{r}-{k}", owned) == victim_i][
        :GROUPS_PER_ROUND
    ]
    victim = fleet[victim_i]
    survivors = [m for m in fleet if m is not victim]
    killed = asyncio.Event()
    committers = [
        FailoverCommitter(survivors[k % len(survivors)].port, g, killed)
        for k, g in enumerate(groups)
    ]
    tasks = [asyncio.create_task(c.run()) for c in committers]
    try:
        deadline = time.monotonic() + 30
        while any(c.acks < 20 for c in committers):
            if time.monotonic() > deadline or any(t.done() for t in tasks):
                raise RuntimeError(
                    f"round {r}: no acknowledged commits before the kill "
                    f"({[(c.group, c.acks, c.errors_before) for c in committers]})"
                )
            await asyncio.sleep(0.02)
        victim.kill9()
        killed_at = time.monotonic()
        killed.set()
        settled_s = await settle(survivors)  # kill -> the survivors serve all 50 once
        await asyncio.wait_for(asyncio.gather(*tasks), 60)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    finally:
        if victim.killed:
            victim.server.proc.wait(10)
            graveyard.append(victim.server.log_tail(15))
            victim.stop()  # removes its work directory
            fleet.remove(victim)  # the caller's list: what is left to stop on a failure
    lost = sum(c.fetched is None or c.fetched < c.acked_before for c in committers)
    t0 = time.monotonic()
    fleet.append(start_member(ctx, upstream))  # the replacement
    await settle(fleet)
    rejoin_s = time.monotonic() - t0
    return Round(
        failover_s=max(c.recovered_at for c in committers) - killed_at,
        answered_s=max(c.answered_at for c in committers) - killed_at,
        settled_s=settled_s,
        rejoin_s=rejoin_s,
        lost=lost,
        retries=sum(c.retries for c in committers),
        timeouts=sum(c.timeouts for c in committers),
        errors_before=sum(c.errors_before for c in committers),
        codes=_merged(c.codes for c in committers),
        codes_before=_merged(c.codes_before for c in committers),
    )


def _merged(counts: Iterable[dict[int, int]]) -> dict[int, int]:
    out: dict[int, int] = {}
    for c in counts:
        for k, v in c.items():
            out[k] = out.get(k, 0) + v
    return dict(sorted(out.items()))


def pct(xs: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))]


# ---- the scenario -------------------------------------------------------------------------------


def failover_metrics(p50: Goal | None, worst: Goal) -> list[Metric]:
    return [
        Metric("failover_rounds", "failover: kill -9 rounds (--quick: fewer)", "count"),
        Metric("failover_p50", "failover: kill -> commit acknowledged again, p50", "s", p50),
        Metric("failover_p90", "failover: kill -> commit acknowledged again, p90", "s"),
        Metric("failover_max", "failover: kill -> commit acknowledged again, max", "s", worst),
        Metric("failover_settled_p50", "  kill -> survivors serve all 50 partitions, p50", "s"),
        Metric("failover_settled_max", "  kill -> survivors serve all 50 partitions, max", "s"),
        Metric("rejoin_p50", "  replacement start -> 3 members serve all 50, p50", "s"),
        Metric("rejoin_max", "  replacement start -> 3 members serve all 50, max", "s"),
        Metric("failover_retries", "  retried answers after kills (NOT_COORDINATOR, ...)", "count"),
        Metric("failover_timeouts", "  requests timed out after kills", "count"),
        Metric("failover_errors_before", "  commit errors before the kills", "count", Goal("<", 1)),
        Metric("failover_lost", "lost acknowledged commits", "count", Goal("<", 1)),
    ]


async def failovers(
    ctx: Context, members: list[Member], upstream: int, graveyard: list[str], tag: str
) -> dict[str, float]:
    """FAILOVER_ROUNDS kill -9 rounds (--quick: QUICK_FAILOVER_ROUNDS) on the settled fleet
    `members` (changed in place: each round's victim replaced) in front of `upstream`."""
    rounds: list[Round] = []
    n = QUICK_FAILOVER_ROUNDS if ctx.quick else FAILOVER_ROUNDS
    for r in range(n):
        try:
            got = await failover_round(ctx, members, upstream, r, graveyard)
        except Exception as e:
            ctx.notes.append(f"{tag}: failover round {r} failed: {type(e).__name__}: {e}")
            for m in members:
                if m.server.proc.poll() is None:
                    print(f"[bench] member {m.port} log tail:\n{m.server.log_tail(30)}")
            break
        rounds.append(got)
        if got.failover_s >= FAILOVER_TARGET_S or got.lost:
            ctx.notes.append(
                f"{tag}: round {r}: failover {got.failover_s:.1f}s, lost {got.lost}; "
                f"victim's log tail:\n{graveyard[-1]}"
            )
    times = [x.failover_s for x in rounds]
    out = {
        "failover_rounds": float(len(rounds)),
        "failover_p50": pct(times, 50),
        "failover_p90": pct(times, 90),
        "failover_max": max(times, default=float("nan")),
        "failover_settled_p50": pct([x.settled_s for x in rounds], 50),
        "failover_settled_max": max((x.settled_s for x in rounds), default=float("nan")),
        "rejoin_p50": pct([x.rejoin_s for x in rounds], 50),
        "rejoin_max": max((x.rejoin_s for x in rounds), default=float("nan")),
        "failover_retries": float(sum(x.retries for x in rounds)),
        "failover_timeouts": float(sum(x.timeouts for x in rounds)),
        "failover_errors_before": float(sum(x.errors_before for x in rounds)),
        "failover_lost": float(sum(x.lost for x in rounds)),
    }
    after = _merged(x.codes for x in rounds)
    before = _merged(x.codes_before for x in rounds)
    ctx.notes.append(
        f"{tag}: failover answers by error code (-1: no answer), after the kills {after}"
        + (f", before the kills {before}" if before else "")
    )
    if ctx.quick:
        ctx.notes.append(f"{tag}: --quick: {n} kill -9 rounds, not {FAILOVER_ROUNDS}")
    if len(rounds) < n:
        out["failover_max"] = float("inf")  # an unfinished round fails the goal
    return out


@register(
    "fleet",
    f"sidecar fleet: {FLEET_SIZE} members vs one sidecar --state local, one tansu; "
    f"{COMMITTERS} committers, {HB_GROUPS * HB_PER_GROUP} members at {HB_RATE:,} hb/s; "
    f"kill -9 failover rounds ({FAILOVER_ROUNDS}, --quick {QUICK_FAILOVER_ROUNDS})",
    [
        Metric("fleet_commit_rate", "commits/s, 3-member fleet", "commits/s"),
        Metric("local_commit_rate", "commits/s, one sidecar --state local", "commits/s"),
        Metric("commit_ratio", "commits/s: fleet / local", "ratio", Goal(">=", 0.8)),
        Metric("fleet_commit_p99", "commit p99 under that load, fleet", "ms"),
        Metric("local_commit_p99", "commit p99 under that load, local", "ms"),
        Metric("fleet_commit_cpu_us", "groupcoord CPU per commit, fleet (all members)", "us"),
        Metric("local_commit_cpu_us", "groupcoord CPU per commit, local", "us"),
        Metric("fleet_commit_tansu_cpu_us", "tansu CPU per commit, fleet", "us"),
        Metric("local_commit_tansu_cpu_us", "tansu CPU per commit, local", "us"),
        Metric("fleet_commit_forwarded_pct", "  commits forwarded to another member", "%"),
        Metric("fleet_hb_p99", f"heartbeat p99 at {HB_RATE:,}/s, fleet", "ms"),
        Metric("local_hb_p99", f"heartbeat p99 at {HB_RATE:,}/s, local", "ms"),
        Metric("fleet_hb_p999", "heartbeat p99.9, fleet", "ms"),
        Metric("local_hb_p999", "heartbeat p99.9, local", "ms"),
        Metric("fleet_hb_rate", "  heartbeats/s achieved, fleet", "hb/s"),
        Metric("fleet_hb_forwarded_pct", "  heartbeats forwarded to another member", "%"),
        Metric(
            "fleet_hb_fast_p99",
            f"heartbeat p99 at {HB_FAST_RATE:,}/s, fleet, all through a non-owner",
            "ms",
            Goal("<", 1.0),
        ),
        Metric("local_hb_fast_p99", f"heartbeat p99 at {HB_FAST_RATE:,}/s, local", "ms"),
        Metric(
            "fleet_hb_fast_rate", f"  heartbeats/s achieved at {HB_FAST_RATE:,}/s, fleet", "hb/s"
        ),
        Metric(
            "local_hb_fast_rate", f"  heartbeats/s achieved at {HB_FAST_RATE:,}/s, local", "hb/s"
        ),
        Metric(
            "fleet_hb_fast_cpu", f"  groupcoord CPU at {HB_FAST_RATE:,}/s, fleet (all members)", "%"
        ),
        Metric("local_hb_fast_cpu", f"  groupcoord CPU at {HB_FAST_RATE:,}/s, local", "%"),
        Metric(
            "fleet_hb_fast_cpu_us",
            f"  groupcoord CPU per heartbeat at {HB_FAST_RATE:,}/s, fleet (all members)",
            "us",
        ),
        Metric(
            "local_hb_fast_cpu_us",
            f"  groupcoord CPU per heartbeat at {HB_FAST_RATE:,}/s, local",
            "us",
        ),
        Metric("errors", "errors (commits + heartbeats, both setups)", "count", Goal("<", 1)),
        *failover_metrics(None, Goal("<", FAILOVER_TARGET_S)),
    ],
    serverless=True,
)
async def fleet(ctx: Context, _server: object) -> dict[str, float]:
    if servers.tansu_path() is None:
        raise RuntimeError("tansu not installed (make peers)")
    tansu = servers.start_tansu(servers.tansu_path(), ctx.server_core)  # type: ignore[arg-type]
    local: Member | None = None
    members: list[Member] = []
    graveyard: list[str] = []
    out: dict[str, float] = {}
    try:
        create_topic(tansu.port, COMMIT_TOPIC, 1)
        # -- the single sidecar with its local log
        local = start_member(ctx, tansu.port, "--state", "local")
        await wait_topic([local.port])
        out |= await load_phases(ctx, [local], tansu, "local", None)
        local.stop()
        local = None
        # -- the fleet
        t0 = time.monotonic()
        members = [start_member(ctx, tansu.port) for _ in range(FLEET_SIZE)]
        await settle(members)
        out["fleet_start_s"] = time.monotonic() - t0
        await wait_topic([m.port for m in members])
        owned = await ownership(members)
        out |= await load_phases(ctx, members, tansu, "fleet", owned)
        if not served_once(await ownership(members)):
            ctx.notes.append(f"fleet: ownership moved during the load: {await describe(members)}")
        out["commit_ratio"] = out["fleet_commit_rate"] / max(out["local_commit_rate"], 1e-9)
        out["errors"] = sum(
            out[f"{t}_{k}"] for t in ("fleet", "local") for k in ("commit_errors", "hb_errors")
        )
        # -- failover
        out |= await failovers(ctx, members, tansu.port, graveyard, "fleet")
        return out
    finally:
        if local is not None:
            local.stop()
        for m in members:
            m.stop()
        tansu.stop()

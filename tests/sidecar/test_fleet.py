"""Issue 21's acceptance: three groupcoord sidecars in front of one upstream (tansu, or Apache
Kafka 4.4) are ONE coordinator.

Each consumer bootstraps only at its own sidecar (a pod's clients at 127.0.0.1); the group's
state partition is owned by one member and the others forward to it. Then kill -9 of the owner
under commit load (no acknowledged commit lost), and a SIGSTOPped former owner that wakes after
its partitions moved (it answers nothing from the state it lost).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from coordinator.sidecar.state_topic import partition_for
from tests.support import realclients as rc
from tests.support.sidecar_util import (
    RawClient,
    Relay,
    Sidecar,
    Stack,
    Upstream,
    commit,
    commit_request,
    create_topic,
    fetch,
    kio,
    readyz,
    stack,
    upstream,
)

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]

NOT_COORDINATOR, LOAD_IN_PROGRESS = 16, 14
FAILOVER_TARGET_S = 15.0
# The failover test's fleet session: below the 6 s default (which a stock Kafka's
# group.min.session.timeout.ms requires), as the test Kafka allows, so that two failovers fit
# the target on a loaded machine.
FAST_FLEET = ("--fleet-session-timeout-ms", "4000")


def fleet_doc(s: Sidecar) -> dict[str, Any]:
    url = f"http://127.0.0.1:{s.metrics_port}/fleet"
    with urllib.request.urlopen(url, timeout=5) as response:
        return dict(json.loads(response.read()))


def serving(s: Sidecar) -> set[int]:
    try:
        doc = fleet_doc(s)
    except OSError:
        return set()
    return {p["partition"] for p in doc["partitions"] if p["status"] == "serving"}


def owner_of(stack: Stack, group: str, among: list[Sidecar]) -> Sidecar | None:
    p = partition_for(group, 50)
    owners = [s for s in among if p in serving(s)]
    return owners[0] if len(owners) == 1 else None


async def fleet(stack: Stack, bootstrap: str, n: int, *extra: str) -> list[Sidecar]:
    sidecars = [stack.sidecar(bootstrap, *extra, fleet=True) for _ in range(n)]
    await settled(stack, sidecars)
    return sidecars


async def settled(stack: Stack, sidecars: list[Sidecar], timeout: float = 60) -> None:
    """Until the members between them serve all 50 state partitions, each exactly once, and
    each member serves some (a newcomer has joined: the survivors alone also cover all 50)."""
    def done() -> bool:
        owned = [serving(s) for s in sidecars]
        return (all(owned) and sum(len(o) for o in owned) == 50
                and set().union(*owned) == set(range(50)))

    await rc.wait_until(done, timeout, "the fleet to serve every state partition once",
                        interval=0.2, explain=stack.explain)


async def describe(port: int, group: str) -> Any:
    client = await RawClient.connect(port)
    try:
        response = await client.call(kio(15, 5, "DescribeGroupsRequest", groups=(group,),
                                         include_authorized_operations=False))
    finally:
        client.close()
    return response.groups[0]


async def test_three_sidecars_are_one_coordinator(stack: Stack, upstream: Upstream) -> None:
    sidecars = await fleet(stack, upstream.bootstrap, 3)
    topic, group = upstream.name("shared"), "one-group"
    await create_topic(upstream.bootstrap, topic, 6)
    kinds = ("confluent", "kafka-python", "aiokafka")
    members = [await stack.consumer(kind, f"fleet-{kind}", s.bootstrap, group, topic)
               for kind, s in zip(kinds, sidecars, strict=True)]
    await rc.wait_until(lambda: rc.partition_of(members, 6), 60,
                        "the 6 partitions to be owned exactly once", explain=stack.explain)

    async def one_group_everywhere() -> bool:
        views = [await describe(s.port, group) for s in sidecars]
        return all(v.error_code == 0 and v.group_state == "Stable" and len(v.members) == 3
                   for v in views)

    await rc.wait_until(one_group_everywhere, 30, "the same Stable group of 3 via every sidecar",
                        explain=stack.explain)
    views = [await describe(s.port, group) for s in sidecars]
    assert len({tuple(sorted(m.member_id for m in v.members)) for v in views}) == 1

    # An offset committed via sidecar 1 is fetched via sidecar 2 (and 3).
    assert await commit(sidecars[0].port, "admin-tool", topic, {0: 42, 5: 7}) == 0
    for s in sidecars[1:]:
        assert await fetch(s.port, "admin-tool", topic, 6) == {0: 42, 1: -1, 2: -1, 3: -1,
                                                                4: -1, 5: 7}


class Committer:
    """Commits ever-growing offsets for a few groups through one sidecar and remembers the last
    acknowledged offset of each: what a failover must not lose."""

    def __init__(self, port: int, groups: list[str], topic: str) -> None:
        self.port, self.groups, self.topic = port, groups, topic
        self.acked: dict[str, int] = {}
        self.errors = 0
        self.last_ok = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._next = 0
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        assert self._task is not None
        self._stopping = True  # also ends the loop if a cancellation is lost on the way
        self._task.cancel()
        async with asyncio.timeout(15):
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        client: RawClient | None = None
        while not self._stopping:
            self._next += 1
            for group in self.groups:
                try:
                    if client is None:
                        client = await RawClient.connect(self.port)
                    request = commit_request(group, self.topic, {0: self._next})
                    response = await client.call(request, timeout=5)
                    code = response.topics[0].partitions[0].error_code
                except (OSError, ConnectionError, TimeoutError):
                    if client is not None:
                        client.close()
                    client = None
                    self.errors += 1
                    await asyncio.sleep(0.05)
                    continue
                if code == 0:
                    self.acked[group] = self._next
                    self.last_ok = time.monotonic()
                else:
                    self.errors += 1
                    await asyncio.sleep(0.05)  # a moving partition: retry as clients do


async def test_kill_9_of_the_owner_loses_no_acknowledged_commit(
    stack: Stack, upstream: Upstream
) -> None:
    sidecars = await fleet(stack, upstream.bootstrap, 3, *FAST_FLEET)
    topic, group = upstream.name("failover"), "survivors"
    await create_topic(upstream.bootstrap, topic, 6)
    kinds = ("confluent", "kafka-python", "aiokafka")
    members = {id(s): await stack.consumer(kind, f"fo-{kind}", s.bootstrap, group, topic,
                                           session_timeout_ms=3000)
               for kind, s in zip(kinds, sidecars, strict=True)}
    await rc.wait_until(lambda: rc.partition_of(list(members.values()), 6), 60,
                        "the 6 partitions to be owned exactly once", explain=stack.explain)
    load_groups = [f"load-{i}" for i in range(12)]  # spread over the state partitions
    failovers: list[float] = []
    for round_ in range(2):
        victim = owner_of(stack, group, sidecars)
        assert victim is not None, stack.explain()
        survivors = [s for s in sidecars if s is not victim]
        # One committer per group (each has its own rising sequence), through both survivors.
        committers = [Committer(s.port, load_groups[i::2], topic)
                      for i, s in enumerate(survivors)]
        for c in committers:
            c.start()
        await rc.wait_until(lambda cs=committers: all(len(c.acked) == len(c.groups)
                                                       for c in cs),
                            30, "commits acknowledged for every load group",
                            explain=stack.explain)

        victim.kill()  # kill -9: the pod is gone, and so is its application's consumer
        killed_at = time.monotonic()
        members.pop(id(victim)).kill()
        alive = list(members.values())
        await rc.wait_until(lambda a=alive: rc.partition_of(a, 6), FAILOVER_TARGET_S,
                            "the surviving consumers to own all 6 partitions once",
                            explain=stack.explain)

        async def answering(port: int = survivors[0].port) -> bool:
            return isinstance(await fetch(port, group, topic, 6), dict)

        await rc.wait_until(answering, FAILOVER_TARGET_S, "the group to answer again")
        failovers.append(time.monotonic() - killed_at)
        await settled(stack, survivors)
        await rc.wait_until(lambda cs=committers: all(time.monotonic() - c.last_ok < 0.5
                                                       for c in cs),
                            30, "commits to be acknowledged again")
        for c in committers:
            await c.stop()

        # Zero acknowledged commits lost: every load group's committed offset is the last one
        # its committer saw acknowledged (a commit that failed may have been written: >=).
        lost = []
        for c in committers:
            for g, acked in c.acked.items():
                got = await fetch(survivors[1].port, g, topic, 1)
                if not isinstance(got, dict) or got[0] < acked:
                    lost.append((g, got, acked))
        assert not lost, f"{lost}\n{stack.explain()}"
        # The surviving fleet gets a third member again for the next round.
        replacement = stack.sidecar(upstream.bootstrap, *FAST_FLEET, fleet=True)
        sidecars = [*survivors, replacement]
        members[id(replacement)] = await stack.consumer(
            kinds[round_ % 3], f"fo-new-{round_}", replacement.bootstrap, group, topic,
            session_timeout_ms=3000)
        await settled(stack, sidecars)
        await rc.wait_until(lambda: rc.partition_of(list(members.values()), 6), 60,
                            "the 6 partitions to be owned exactly once", explain=stack.explain)
    assert max(failovers) < FAILOVER_TARGET_S, failovers


async def test_a_paused_former_owner_cannot_overwrite_the_new_owners_state(
    stack: Stack, upstream: Upstream
) -> None:
    sidecars = await fleet(stack, upstream.bootstrap, 3)
    group, topic = "paused", upstream.name("t")
    await create_topic(upstream.bootstrap, topic, 1)
    await rc.wait_until(lambda: all(f"upstream topic {topic} has" in s.log() for s in sidecars),
                        15, "every sidecar to know the topic")
    assert await commit(sidecars[0].port, group, topic, {0: 10}) == 0
    paused = owner_of(stack, group, sidecars)
    assert paused is not None
    others = [s for s in sidecars if s is not paused]
    # A client of the paused member's pod has a commit of an old offset in flight to it.
    stale = await RawClient.connect(paused.port)
    os.killpg(paused.proc.pid, signal.SIGSTOP)
    try:
        await settled(stack, others)  # the partitions moved to the two others
        assert await commit(others[0].port, group, topic, {0: 20}) == 0
        await stale.send(commit_request(group, topic, {0: 15}))
    finally:
        os.killpg(paused.proc.pid, signal.SIGCONT)
    # It wakes with its lease run out: the stale commit is refused (the client retries on the
    # coordinator it finds next), never written over the new owner's 20.
    frame = await stale.receive(timeout=20)
    code = rc_error_code(frame)
    assert code in (NOT_COORDINATOR, LOAD_IN_PROGRESS), code
    stale.close()
    await settled(stack, sidecars)  # it rejoins the fleet

    async def twenty_everywhere() -> bool:
        for s in sidecars:
            got = await fetch(s.port, group, topic, 1)
            if isinstance(got, int):
                return False  # a partition is moving: clients retry, as here
            assert got == {0: 20}, f"{got}\n{stack.explain()}"
        return True

    await rc.wait_until(twenty_everywhere, 30, "every sidecar to answer 20")


def rc_error_code(frame: bytes) -> int:
    from tests.support.sidecar_util import decode

    response = decode(8, 8, frame)
    return int(response.topics[0].partitions[0].error_code)


async def test_a_member_started_before_its_upstream_waits_for_it(stack: Stack) -> None:
    """tansu only: the upstream's address is a relay that starts dark. In front of the shared
    Kafka that would prove little: once reached, the members talk to the brokers Metadata names."""
    relay_port = rc.free_port()
    tansu = stack.tansu(advertised=relay_port)
    relay = Relay(relay_port, tansu.port)  # the upstream's address, dark for now
    stack.relays.append(relay)
    member = stack.sidecar(f"127.0.0.1:{relay_port}", fleet=True)
    await rc.wait_until(lambda: "fleet cannot start yet" in member.log(), 20,
                        "the member to report the upstream missing")
    status, text = readyz(member)
    assert status == 503 and text.startswith("upstream unreachable: "), (status, text)
    group_answer = await fetch(member.port, "early", "t", 1)
    assert group_answer == LOAD_IN_PROGRESS  # clients retry in place until the fleet is up

    await relay.start()
    await settled(stack, [member], timeout=30)
    await rc.wait_until(lambda: readyz(member)[0] == 200, 10, "the member to be ready")
    assert member.proc.poll() is None
    # Its state writes work after the failed starts (each start makes its producer anew).
    await create_topic(f"127.0.0.1:{relay_port}", "t", 1)
    assert await commit(member.port, "early", "t", {0: 5}) == 0
    assert await fetch(member.port, "early", "t", 1) == {0: 5}


async def test_claims_of_an_earlier_fleet_era_do_not_block_a_new_one(
    stack: Stack, upstream: Upstream
) -> None:
    """The upstream forgot the fleet group (every member gone past its retention), so its
    generations start again below the claims in the state topic: the new fleet claims above
    them instead of staying fenced forever."""
    from aiokafka import AIOKafkaProducer

    from coordinator.sidecar.state_topic import Claim, StateTopic, headers
    from coordinator.sidecar.upstream_clients import client_options

    bootstrap = upstream.bootstrap
    names = stack.fleet_names(bootstrap)  # the state topic the Stack's sidecars will use
    name = names[names.index("--state-topic") + 1] if names else "__groupcoord_state"
    topic = StateTopic(name, 50, -1, 0, lambda: client_options(bootstrap))
    await topic.start()
    await topic.stop()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        old = Claim(57, "gone-member", "10.0.0.9:9094")
        a_day_ago_ms = int(time.time() * 1000) - 86_400_000
        for p in range(50):
            await producer.send_and_wait(name, old.value(), old.key(),
                                         partition=p, timestamp_ms=a_day_ago_ms,
                                         headers=headers(old))
    finally:
        await producer.stop()
    member = stack.sidecar(bootstrap, fleet=True)
    await settled(stack, [member], timeout=30)
    assert all(p["epoch"] == 58 for p in fleet_doc(member)["partitions"])


async def test_a_fleet_session_the_upstream_refuses_is_said_not_waited_on(
    stack: Stack, kafka: Any
) -> None:
    """Kafka refuses a classic session outside group.min/max.session.timeout.ms with
    INVALID_SESSION_TIMEOUT (the max here: 30 minutes by default). aiokafka keeps that answer
    for a poll the fleet never made: the member must say it, not wait unready in silence."""
    member = stack.sidecar(kafka.bootstrap, "--fleet-session-timeout-ms", "1900000", fleet=True)

    def refused() -> bool:
        status, text = readyz(member)
        return status == 503 and "InvalidSessionTimeoutError" in text

    await rc.wait_until(refused, 30, "/readyz to name the refusal", explain=stack.explain)
    assert member.log().count("fleet group") >= 1 and "refused" in member.log()

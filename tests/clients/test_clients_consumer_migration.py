"""The online upgrade and downgrade with real clients (issue 23 item 6, acceptance): a classic
group of three Java consumers (kafka-clients 4.4, group.protocol=classic) is rolled member by
member to group.protocol=consumer -- stop one, start it again with the consumer protocol -- and
then rolled back to classic, while every member keeps committing.

What it shows:
- the first consumer-protocol member turns the classic group into a consumer group in which the
  classic members keep working (JoinGroup/SyncGroup/Heartbeat answered by the consumer group),
  and ConsumerGroupDescribe lists both kinds (MemberType 0 and 1);
- when the last consumer-protocol member leaves, the group is a classic group again;
- at no moment is a partition owned by two members: every member's assigned/revoked events,
  merged in the order the test read them, never show an overlap;
- committed offsets never go backwards (sampled with OffsetFetch all along) and commits go on:
  after the last step every partition has a commit of a later round.

The server runs with a 500 ms heartbeat interval and a 4 s consumer session timeout; the classic
members heartbeat every 500 ms. Every wait is a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest

from coordinator.broker.answers import make
from coordinator.tools.groups_wire import KafkaConnection, nested, one_call
from protocol import apis
from tests.support import realclients as rc
from tests.support.realclients import PARTITIONS, Member, explain_members, partition_of, wait_until

pytestmark = [pytest.mark.clients, pytest.mark.java]

TOPIC = "orders"
OPTIONS = {
    "consumer_heartbeat_interval_ms": 500,
    "consumer_session_timeout_ms": 4000,
    "initial_rebalance_delay_ms": 0,
}


async def _java(members: Any, name: str, broker: rc.Broker, group: str, protocol: str,
                assignor: str) -> Member:  # fmt: skip
    return await members(
        "java",
        name,
        bootstrap=broker.bootstrap,
        group=group,
        topic=TOPIC,
        assignors=[assignor] if protocol == "classic" else ["uniform"],
        session_timeout_ms=6000,
        group_protocol=protocol,
    )


async def committed(broker: rc.Broker, group: str) -> dict[int, int]:
    """OffsetFetch (all topics) of the group, as an admin: partition -> offset."""
    conn = await KafkaConnection.open(broker.host, broker.port, 10)
    try:
        cls = nested(apis.OFFSET_FETCH, conn.version(apis.OFFSET_FETCH), "OffsetFetchRequestGroup")
        response = await conn.call(
            apis.OFFSET_FETCH, 10, groups=(make(cls, group_id=group, topics=None),)
        )
    finally:
        conn.close()
    (fetched,) = response.groups
    return {
        int(p.partition_index): int(p.committed_offset)
        for t in fetched.topics
        for p in t.partitions
        if t.name == TOPIC and int(p.committed_offset) >= 0
    }


async def describe_types(broker: rc.Broker, group: str) -> tuple[str, list[int]] | None:
    """ConsumerGroupDescribe: (state, sorted member types), or None if not a consumer group."""
    response = await one_call(
        broker.host,
        broker.port,
        apis.CONSUMER_GROUP_DESCRIBE,
        10,
        group_ids=(group,),
        include_authorized_operations=False,
    )
    (described,) = response.groups
    if described.error_code != 0:
        return None
    return described.group_state, sorted(int(m.member_type) for m in described.members)


class Watch:
    """Commits in rounds (a member gets "commit N" once it answered its previous one) and
    samples the committed offsets, failing on any that went backwards."""

    def __init__(self, broker: rc.Broker, group: str) -> None:
        self.broker, self.group = broker, group
        self.members: list[Member] = []  # every member ever started, in order
        self.live: list[Member] = []
        self.round = 0
        self.sent: dict[str, int] = {}  # member name -> events count when its commit was sent
        self.last: dict[int, int] = {}
        self.samples = 0
        self.regressions: list[str] = []
        self.stopped = False  # ends the loops even if a cancellation is lost (3.11's wait_for)

    def answered(self, m: Member) -> bool:
        start = self.sent.get(m.name)
        if start is None:
            return True
        return any(e["event"] in ("committed", "commit_failed") for e in m.events[start:])

    async def commits(self) -> None:
        while not self.stopped:
            self.round += 1
            for m in list(self.live):
                if m.running() and m.owned and self.answered(m):
                    self.sent[m.name] = len(m.events)
                    assert m.proc.stdin is not None
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        m.proc.stdin.write(f"commit {self.round}\n".encode())
            await asyncio.sleep(0.3)

    async def sampler(self) -> None:
        while not self.stopped:
            now: dict[int, int] | None = None
            with contextlib.suppress(Exception):  # a fetch that fails is just no sample
                now = await committed(self.broker, self.group)
            if now is not None:
                self.regressions += [
                    f"partition {p}: committed offset went back {offset} -> {now.get(p)}"
                    for p, offset in self.last.items()
                    if now.get(p, -1) < offset
                ]
                self.last = now
                self.samples += 1
            await asyncio.sleep(0.25)


def check_never_owned_twice(members: list[Member]) -> int:
    """Merge every member's assigned/revoked events by the time the test read them and replay
    them: no partition may be owned by two members at once. Returns the events checked."""
    events = sorted(
        ((e["t"], m.name, e) for m in members for e in m.events if e["event"] in
         ("assigned", "revoked")),
        key=lambda x: x[0],
    )  # fmt: skip
    owned: dict[str, set[int]] = {}
    for _, name, e in events:
        if e["event"] == "assigned":
            owned[name] = set(e["partitions"])
        else:
            owned.setdefault(name, set()).difference_update(e["partitions"])
        holders: dict[int, str] = {}
        for who, ps in owned.items():
            for p in ps:
                assert p not in holders, f"partition {p} owned by {holders[p]} and {who}: {e}"
                holders[p] = who
    return len(events)


async def roll(members: Any, watch: Watch, broker: rc.Broker, group: str, i: int, protocol: str,
               assignor: str) -> None:  # fmt: skip
    """Stop live member i (LeaveGroup / leave heartbeat), start its successor with `protocol`,
    and wait until the live members own every partition once."""
    old = watch.live[i]
    watch.live.remove(old)
    await old.close()
    new = await _java(members, f"{protocol}-{len(watch.members)}", broker, group, protocol,
                      assignor)  # fmt: skip
    watch.members.append(new)
    watch.live.insert(i, new)
    await wait_until(
        lambda: all(m.running() for m in watch.live) and partition_of(watch.live, PARTITIONS),
        40,
        f"the group to settle with {new.name}",
        interval=0.1,
        explain=lambda: explain_members(watch.live, broker),
    )


@pytest.mark.parametrize("assignor", ["cooperative-sticky", "range"])
async def test_a_classic_group_rolls_to_the_consumer_protocol_and_back(
    request: Any, server: Any, members: Any, assignor: str
) -> None:
    request.getfixturevalue("java_peers")
    broker = server(topics={TOPIC: PARTITIONS}, **OPTIONS)
    group = f"migrate-{assignor}"
    watch = Watch(broker, group)
    for i in range(3):
        m = await _java(members, f"classic-{i}", broker, group, "classic", assignor)
        watch.members.append(m)
        watch.live.append(m)
    await wait_until(
        lambda: partition_of(watch.live, PARTITIONS),
        40,
        "the classic group to form",
        explain=lambda: explain_members(watch.live, broker),
    )
    tasks = [asyncio.create_task(watch.commits()), asyncio.create_task(watch.sampler())]
    try:
        await wait_until(lambda: len(watch.last) == PARTITIONS, 20, "commits of every partition")
        assert await describe_types(broker, group) is None  # still a classic group

        t0 = time.monotonic()
        for i in range(3):  # classic -> consumer, member by member
            await roll(members, watch, broker, group, i, "consumer", assignor)
            types = await describe_types(broker, group)
            assert types is not None, "not upgraded to a consumer group"
            assert types[1] == sorted([1] * (i + 1) + [0] * (2 - i)), types
        upgraded_s = time.monotonic() - t0

        for i in range(3):  # and back: the last consumer member leaving downgrades
            await roll(members, watch, broker, group, i, "classic", assignor)
        assert await describe_types(broker, group) is None, "not downgraded to a classic group"

        final = watch.round
        await wait_until(
            lambda: len(watch.last) == PARTITIONS and min(watch.last.values()) > final,
            20,
            "a later round of commits on every partition",
            explain=lambda: f"{watch.last}\n" + explain_members(watch.live, broker),
        )
    finally:
        watch.stopped = True
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
    checked = check_never_owned_twice(watch.members)
    assert not watch.regressions, watch.regressions
    assert watch.samples > 10
    assert "Traceback" not in broker.log_tail(5000), broker.log_tail(80)
    print(
        f"{assignor}: upgraded in {upgraded_s:.1f} s, {checked} assignment events and "
        f"{watch.samples} offset samples checked, {watch.round} commit rounds"
    )

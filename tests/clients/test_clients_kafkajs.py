"""kafkajs (npm, 2.x) as a real client: the product promises it works; these tests hold us to it.

The driver is tests/clients/kafkajs_driver.js (kafkajs is installed by tests/support/peers.py into
the peers dir). kafkajs' only assignor is its own round robin, protocol name "RoundRobinAssigner",
which no other client lists, so kafkajs groups are kafkajs-only; it has no static membership. What
is checked, as for the other clients (issue 2): N = 1..3 members split a 12-partition topic and
DescribeGroups agrees with each member; a clean close (LeaveGroup, on "close" or SIGTERM) hands the
partitions over long before the session timeout, a killed member's move only after it; offsets
committed with kafkajs' commitOffsets (OffsetCommit v5) read back through an admin client's
OffsetFetch, and survive the rebalance. Every request kafkajs sends must be one we serve: the
server would log "closing connection" for an API or version outside protocol/apis.py.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
import time
from typing import Any

import pytest

from tests.support.realclients import (
    PARTITIONS,
    Broker,
    Member,
    assert_stable_and_described,
    describe_kafka_python,
    explain_members,
    partition_of,
    wait_until,
)

pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("kafkajs_peers")]

KIND = "kafkajs"
PROTOCOL = "RoundRobinAssigner"


async def start(members: Any, broker: Broker, group: str, n: int, **kw: Any) -> list[Member]:
    return [
        await members(
            KIND,
            f"{KIND}-{i}",
            bootstrap=broker.bootstrap,
            group=group,
            topic="orders",
            assignors=["roundrobin"],
            **kw,
        )
        for i in range(n)
    ]


def served_everything(broker: Broker) -> None:
    """No request from kafkajs fell outside our API table (which closes the connection)."""
    log = broker.log_path.read_text(errors="replace")
    assert "closing connection" not in log, broker.log_tail()


async def commit(member: Member, offset: int, timeout: float = 15) -> dict[str, Any]:
    """Ask the driver to commit `offset` on every partition it owns; return its "committed"."""
    assert member.proc.stdin is not None
    mark = len(member.events)
    member.proc.stdin.write(f"commit {offset}\n".encode())
    await member.proc.stdin.drain()

    def answered() -> dict[str, Any] | None:
        for ev in member.events[mark:]:
            if ev["event"] in ("committed", "commit_failed") and ev["offset"] == offset:
                return ev
        return None

    ev: dict[str, Any] = await wait_until(
        answered, timeout, f"{member.name} to commit {offset}", explain=member.log_tail
    )
    assert ev["event"] == "committed", ev
    return ev


def offset_fetch(bootstrap: str, group: str, topic: str = "orders") -> dict[int, int]:
    """Committed offsets by partition, through confluent's admin client (OffsetFetch)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p) for p in range(PARTITIONS)]
    )
    result = admin.list_consumer_group_offsets([request], request_timeout=10)[group].result(10)
    offsets = {}
    for tp in result.topic_partitions:
        assert tp.error is None, tp
        if tp.offset >= 0:  # -1001: nothing committed
            offsets[tp.partition] = tp.offset
    return offsets


@pytest.mark.parametrize("n", [1, 2, 3])
async def test_kafkajs_members_split_the_topic(server, members, n):
    broker = server(topics={"orders": PARTITIONS})
    group = f"g-kafkajs-{n}"
    ms = await start(members, broker, group, n)
    view = await assert_stable_and_described(broker, group, ms)
    assert view.protocol == PROTOCOL
    assert set(view.client_ids.values()) == {m.name for m in ms}
    # A second admin client (kafka-python) reads the same group the same way.
    other = await asyncio.to_thread(describe_kafka_python, broker.bootstrap, group)
    assert other.members == view.members
    assert other.protocol == PROTOCOL
    # kafkajs' round robin deals the partitions out in turn: 12 / n each, n apart.
    assert all(len(m.owned) == PARTITIONS // n for m in ms), [sorted(m.owned) for m in ms]
    if n > 1:
        for m in ms:
            owned = sorted(m.owned)
            assert {b - a for a, b in itertools.pairwise(owned)} == {n}, owned
    # Every member reports the same generation, the one it joined with.
    assert len({m.generation for m in ms}) == 1 and ms[0].generation is not None
    served_everything(broker)


@pytest.mark.parametrize("how", ["stdin", "sigterm"])
async def test_kafkajs_clean_close_hands_partitions_over(server, members, how):
    broker = server(topics={"orders": PARTITIONS})
    group = f"close-kafkajs-{how}"
    # A session far longer than the (generous) wait below: a takeover within the wait can only
    # come from the LeaveGroup, never from the leaver's session running out.
    session_ms, wait_s = 300_000, 60
    ms = await start(members, broker, group, 3, session_timeout_ms=session_ms)
    await assert_stable_and_described(broker, group, ms)
    leaving, survivors = ms[0], ms[1:]
    if how == "stdin":
        await leaving.close()
    else:
        leaving.proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(leaving.proc.wait(), 30)
        assert leaving.reader is not None
        await asyncio.wait_for(leaving.reader, 5)
    assert leaving.proc.returncode == 0, leaving.log_tail()
    assert leaving.events[-1]["event"] == "closed", leaving.events[-3:]
    # LeaveGroup makes the coordinator rebalance now, not after the 300 s session timeout.
    await wait_until(
        lambda: partition_of(survivors, PARTITIONS),
        wait_s,
        "the survivors to take over the leaver's partitions (LeaveGroup), well before its "
        "session timeout",
        explain=lambda: explain_members(ms, broker),
    )
    view = await assert_stable_and_described(broker, group, survivors)
    assert view.protocol == PROTOCOL
    served_everything(broker)


async def test_kafkajs_killed_member_expires_after_session_timeout(server, members):
    broker = server(topics={"orders": PARTITIONS})
    group = "kill-kafkajs"
    session_ms, heartbeat_ms = 6000, 500
    ms = await start(
        members, broker, group, 3, session_timeout_ms=session_ms, heartbeat_interval_ms=heartbeat_ms
    )
    await assert_stable_and_described(broker, group, ms)
    victim, survivors = ms[0], ms[1:]
    t0 = time.monotonic()
    victim.kill()
    await victim.proc.wait()
    await wait_until(
        lambda: partition_of(survivors, PARTITIONS),
        session_ms / 1000 + 20,
        "the survivors to take over the killed member's partitions",
        explain=lambda: explain_members(ms, broker),
    )
    # Nothing moved before the session timeout (a closed connection is not a LeaveGroup).
    reactions = [e["t"] - t0 for s in survivors for e in s.events_since(t0)]
    assert reactions, "survivors saw no rebalance"
    assert min(reactions) >= (session_ms - heartbeat_ms) / 1000 - 1.0, sorted(reactions)
    await assert_stable_and_described(broker, group, survivors)


async def test_kafkajs_commits_are_visible_through_offset_fetch(server, members):
    broker = server(topics={"orders": PARTITIONS})
    group = "commit-kafkajs"
    a, b = await start(members, broker, group, 2)
    await assert_stable_and_described(broker, group, [a, b])
    assert a.owned is not None and b.owned is not None
    first = await commit(a, 100)
    second = await commit(b, 200)
    assert first["partitions"] == sorted(a.owned) and second["partitions"] == sorted(b.owned)
    assert first["generation"] == a.generation == b.generation == second["generation"]
    expected = dict.fromkeys(a.owned, 100) | dict.fromkeys(b.owned, 200)
    assert await asyncio.to_thread(offset_fetch, broker.bootstrap, group) == expected

    # a leaves; b takes everything over, a's commits stay (they belong to the group), and b's
    # commit in the new generation replaces them.
    await a.close()
    await wait_until(
        lambda: partition_of([b], PARTITIONS),
        15,
        "the survivor to take over every partition",
        explain=lambda: explain_members([a, b], broker),
    )
    assert await asyncio.to_thread(offset_fetch, broker.bootstrap, group) == expected
    third = await commit(b, 300)
    assert third["partitions"] == list(range(PARTITIONS))
    assert third["generation"] == b.generation > first["generation"]
    assert await asyncio.to_thread(offset_fetch, broker.bootstrap, group) == dict.fromkeys(
        range(PARTITIONS), 300
    )
    served_everything(broker)

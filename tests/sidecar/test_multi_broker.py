"""A sidecar fleet in front of a three-broker Apache Kafka cluster (issue 34, item 3).

Clients see only sidecar addresses, yet reach the leader of every partition, wherever it is; the
fleet's own topics are replicated 3 times with min.insync.replicas 2; and a broker killed with
kill -9 mid-stream costs the clients a leader election, not a rebalance nor an acknowledged commit.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from coordinator.sidecar.state_topic import durability
from tests.sidecar.test_fleet import Committer, serving
from tests.sidecar.test_sidecar_clients import lag_sum
from tests.support import realclients as rc
from tests.support.kafka import KafkaCluster, unique
from tests.support.sidecar_util import Sidecar, Stack, commit, create_topic, fetch, produce, stack

pytestmark = pytest.mark.clients
__all__ = ["stack"]

STATE_PARTITIONS = 6  # fewer than the default 50: three brokers replicate each of them 3 times
PARTITIONS = 3


def test_fleet_topics_are_replicated_as_the_cluster_allows() -> None:
    # (replication factor setting, min.insync setting, brokers) -> what the topic is created with
    assert durability(-1, 0, 1) == (1, 0)  # one broker, or tansu: RF 1, the cluster's min.insync
    assert durability(-1, 0, 2) == (2, 0)  # 2 of 2 in sync would stop writes while one is down
    assert durability(-1, 0, 3) == (3, 2)  # as Kafka's __transaction_state
    assert durability(-1, 0, 7) == (3, 2)
    assert durability(2, 0, 7) == (2, 0)  # explicit settings are kept
    assert durability(-1, 1, 3) == (3, 1)
    assert durability(5, 3, 7) == (5, 3)


async def fleet_of_three(stack: Stack, cluster: KafkaCluster) -> list[Sidecar]:
    sidecars = [stack.sidecar(cluster.bootstrap, "--state-topic-partitions",
                              str(STATE_PARTITIONS), fleet=True) for _ in range(3)]

    def settled() -> bool:
        owned = [serving(s) for s in sidecars]
        return (all(owned) and sum(len(o) for o in owned) == STATE_PARTITIONS
                and set().union(*owned) == set(range(STATE_PARTITIONS)))

    await rc.wait_until(settled, 90, "the fleet to serve every state partition once",
                        interval=0.2, explain=stack.explain)
    return sidecars


async def admin_call(bootstrap: str, call: Any) -> Any:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        return await call(admin)
    finally:
        await admin.close()


async def leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """partition -> leader node id, asked of `bootstrap`."""
    described = await admin_call(bootstrap, lambda a: a.describe_topics([topic]))
    return {p["partition"]: p["leader"] for p in described[0]["partitions"]}


async def topic_shape(bootstrap: str, topic: str) -> tuple[set[int], str] | None:
    """(the replica counts of the topic's partitions, its min.insync.replicas), straight from
    Kafka: Metadata and DescribeConfigs; None while the topic does not exist. Listed first:
    aiokafka's describe_topics asks with auto-creation allowed, which would create the topic
    with the broker's defaults before the sidecar does (the history topic is made on its first
    write)."""
    if topic not in await admin_call(bootstrap, lambda a: a.list_topics()):
        return None
    described = await admin_call(bootstrap, lambda a: a.describe_topics([topic]))
    if described[0]["error_code"] != 0:
        return None
    replicas = {len(p["replicas"]) for p in described[0]["partitions"]}
    resource = ConfigResource(ConfigResourceType.TOPIC, topic)
    response = await admin_call(bootstrap, lambda a: a.describe_configs([resource]))
    entries = response[0].resources[0][4]
    return replicas, next(str(e[1]) for e in entries if e[0] == "min.insync.replicas")


async def test_every_broker_leads_partitions_the_clients_reach_through_the_sidecars(
    stack: Stack, kafka3: KafkaCluster
) -> None:
    sidecars = await fleet_of_three(stack, kafka3)
    topic = unique("three-leaders")
    await create_topic(sidecars[0].bootstrap, topic, PARTITIONS, replication=3)
    await rc.wait_until(lambda: leaders(kafka3.bootstrap, topic), 20, "leaders for the topic")
    led_by = await leaders(kafka3.bootstrap, topic)
    assert sorted(led_by.values()) == [1, 2, 3], led_by  # one partition led by each broker

    # Through a sidecar, every broker is a sidecar port; no Kafka address reaches the client.
    kafka_ports = {n.port for n in kafka3.nodes}
    for s in sidecars:
        cluster = await admin_call(s.bootstrap, lambda a: a.describe_cluster())
        ports = {b["port"] for b in cluster["brokers"]}
        assert len(ports) == 3 and not ports & kafka_ports, (cluster, kafka_ports)
        assert {b["host"] for b in cluster["brokers"]} == {"127.0.0.1"}

    # Produce to each partition (each led by another broker) via one sidecar, read via another.
    producer = AIOKafkaProducer(bootstrap_servers=sidecars[0].bootstrap, acks="all")
    await producer.start()
    try:
        for p in range(PARTITIONS):
            for i in range(5):
                await producer.send_and_wait(topic, f"p{p}-{i}".encode(), partition=p)
        leaders_seen = {p: producer.client.cluster.leader_for_partition(TopicPartition(topic, p))
                        for p in range(PARTITIONS)}
        assert leaders_seen == led_by  # the client's view: Kafka's node ids at sidecar ports
        ports = {producer.client.cluster.broker_metadata(n).port for n in led_by.values()}
        assert ports.isdisjoint(kafka_ports), ports
    finally:
        await producer.stop()
    # A group member (its group's events are the first history the fleet writes).
    consumer = AIOKafkaConsumer(bootstrap_servers=sidecars[1].bootstrap, group_id=unique("g"),
                                auto_offset_reset="earliest", enable_auto_commit=False)
    consumer.subscribe([topic])
    await consumer.start()
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    try:
        deadline = time.monotonic() + 30
        while sum(map(len, got.values())) < 5 * PARTITIONS and time.monotonic() < deadline:
            for tp, messages in (await consumer.getmany(timeout_ms=500)).items():
                got[tp.partition].extend(m.value for m in messages)
    finally:
        await consumer.stop()
    assert got == {p: [f"p{p}-{i}".encode() for i in range(5)] for p in range(PARTITIONS)}

    # The fleet's own topics: 3 replicas, 2 of them in sync before a write is acknowledged.
    suffix = stack.suffix
    for fleet_topic in (f"__groupcoord_state_{suffix}", f"__groupcoord_history_{suffix}"):
        shape = await rc.wait_until(lambda t=fleet_topic: topic_shape(kafka3.bootstrap, t), 20,
                                    f"{fleet_topic} to be created")
        assert shape == ({3}, "2"), fleet_topic


class Producing:
    """Keyed records to every partition through one sidecar (acks=all), until stopped; `acked`
    counts the acknowledged ones, `errors` the failed sends (retried by the client first)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.acked = 0
        self.errors: list[str] = []
        self.last_ok = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        self._stopping = True
        assert self._task is not None
        async with asyncio.timeout(60):
            await self._task

    async def _run(self) -> None:
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5,
                                    request_timeout_ms=10000, retry_backoff_ms=100)
        await producer.start()
        try:
            n = 0
            while not self._stopping:
                futures = [await producer.send(self.topic, f"k{n + i}".encode(),
                                               partition=(n + i) % PARTITIONS)
                           for i in range(PARTITIONS * 2)]
                n += len(futures)
                for result in await asyncio.gather(*futures, return_exceptions=True):
                    if isinstance(result, BaseException):
                        self.errors.append(repr(result))
                    else:
                        self.acked += 1
                        self.last_ok = time.monotonic()
                await asyncio.sleep(0.05)
        finally:
            await producer.stop()


def generations(sidecars: list[Sidecar], group: str) -> set[int]:
    """The group's generation as its owning member shows it (/groups)."""
    found = set()
    for s in sidecars:
        try:
            docs = s.groups()
        except OSError:
            continue
        found |= {int(d["generation_id"]) for d in docs if d.get("group_id") == group}
    return found


def committed(member: rc.Member) -> dict[int, int]:
    """The highest offset the member's commits were acknowledged with, per partition."""
    out: dict[int, int] = {}
    for e in member.events:
        if e["event"] == "committed":
            for p, o in e["offsets"].items():
                out[int(p)] = max(out.get(int(p), -1), int(o))
    return out


def assignments(member: rc.Member) -> int:
    return sum(1 for e in member.events if e["event"] in ("assigned", "revoked"))


async def test_kill_9_of_a_broker_mid_stream_costs_no_rebalance_and_no_commit(
    stack: Stack, kafka3: KafkaCluster
) -> None:
    sidecars = await fleet_of_three(stack, kafka3)
    topic, group = unique("broker-kill"), unique("through-the-kill")
    await create_topic(kafka3.bootstrap, topic, PARTITIONS, replication=3)
    await rc.wait_until(lambda: leaders(kafka3.bootstrap, topic), 20, "leaders for the topic")
    kinds = ("aiokafka", "kafka-python", "confluent")
    members = [await stack.consumer(kind, f"bk-{kind}", s.bootstrap, group, topic)
               for kind, s in zip(kinds, sidecars, strict=True)]
    producing = Producing(sidecars[0].bootstrap, topic)
    producing.start()
    await rc.wait_until(lambda: rc.partition_of(members, PARTITIONS), 60,
                        "the 3 partitions to be owned exactly once", explain=stack.explain)
    await rc.wait_until(lambda: all(committed(m) for m in members), 30,
                        "every member to commit", explain=stack.explain)
    load_groups = [unique(f"load-{i}") for i in range(6)]
    committers = [Committer(s.port, load_groups[i::3], topic) for i, s in enumerate(sidecars)]
    for c in committers:
        c.start()
    await rc.wait_until(lambda: all(len(c.acked) == len(c.groups) for c in committers), 30,
                        "commits acknowledged for every load group", explain=stack.explain)
    before = generations(sidecars, group)
    assert len(before) == 1, before
    rebalances = [assignments(m) for m in members]

    # The leader of partition 0 dies (kill -9); its partitions are led elsewhere within seconds.
    victim = (await leaders(kafka3.bootstrap, topic))[0]
    kafka3.kill(victim - 1)
    killed_at = time.monotonic()
    alive = ",".join(n.address for n in kafka3.nodes if n.node_id != victim)

    async def moved() -> bool:
        live = {n.node_id for n in kafka3.nodes if n.node_id != victim}
        return set((await leaders(alive, topic)).values()) <= live

    await rc.wait_until(moved, 30, "the dead broker's partitions to get new leaders")
    # Everything carries on through the sidecars: records produced and consumed past the kill,
    # commits acknowledged again, by the same clients.
    acked_then = producing.acked
    seen_then = [len(m.events) for m in members]
    commits_then = [dict(c.acked) for c in committers]

    def flowing() -> bool:
        return (producing.acked > acked_then + 30
                and all(all(c.acked[g] > then[g] for g in c.groups)
                        for c, then in zip(committers, commits_then, strict=True))
                and all(any(e["event"] == "committed" for e in m.events[n:])
                        for m, n in zip(members, seen_then, strict=True)))

    await rc.wait_until(flowing, 45, "produce, consume and commit to flow again",
                        explain=stack.explain)
    recovered_s = time.monotonic() - killed_at
    await producing.stop()
    for c in committers:
        await c.stop()

    # No rebalance because of it: the same generation, no member revoked or assigned anything.
    assert generations(sidecars, group) == before, stack.explain()
    assert [assignments(m) for m in members] == rebalances, stack.explain()
    assert all(m.running() for m in members)

    # No acknowledged commit lost: OffsetFetch answers at least what was acknowledged.
    acked: dict[int, int] = {}
    for m in members:
        for p, o in committed(m).items():
            acked[p] = max(acked.get(p, -1), o)
    async def offsets(port: int, group: str, partitions: int) -> dict[int, int] | None:
        answer = await fetch(port, group, topic, partitions)
        return answer if isinstance(answer, dict) else None  # retriable: a partition moving

    got = await rc.wait_until(lambda: offsets(sidecars[2].port, group, PARTITIONS), 20,
                              "the group's offsets")
    assert all(got[p] >= o for p, o in acked.items()), (got, acked)
    lost = []
    for i, c in enumerate(committers):
        for g, offset in c.acked.items():
            port = sidecars[(i + 1) % 3].port
            answer = await rc.wait_until(lambda g=g, port=port: offsets(port, g, 1), 20,
                                         f"{g}'s offsets")
            if answer[0] < offset:
                lost.append((g, answer, offset))
    assert not lost, f"{lost}\n{stack.explain()}"
    print(f"recovered {recovered_s:.1f} s after the kill; {producing.acked} records acknowledged,"
          f" {len(producing.errors)} sends failed")


async def test_the_sidecar_follows_a_partition_to_its_new_leader_by_itself(
    stack: Stack, kafka3: KafkaCluster
) -> None:
    """No client asks Metadata through the sidecar and its periodic refresh is a minute away: when
    the leader of a partition dies, the sidecar's own requests to it (the lag's ListOffsets) fail,
    and that alone makes it re-read the cluster and ask the new leader."""
    topic, group = unique("follow-leader"), unique("lagging")
    await create_topic(kafka3.bootstrap, topic, 1, replication=3)
    await rc.wait_until(lambda: leaders(kafka3.bootstrap, topic), 20, "a leader for the topic")
    sidecar = stack.sidecar(kafka3.bootstrap, refresh_ms=60_000)  # --state local
    assert await commit(sidecar.port, group, topic, {0: 0}) == 0
    await produce(kafka3.bootstrap, topic, [f"a{i}" for i in range(5)])
    await rc.wait_until(lambda: lag_sum(stack, group) == 5, 15, "the lag to read 5")

    victim = (await leaders(kafka3.bootstrap, topic))[0]
    kafka3.kill(victim - 1)
    alive = ",".join(n.address for n in kafka3.nodes if n.node_id != victim)

    async def elected() -> bool:
        return (await leaders(alive, topic))[0] not in (victim, -1)

    await rc.wait_until(elected, 30, "a new leader")
    await produce(alive, topic, [f"b{i}" for i in range(5)])
    await rc.wait_until(lambda: lag_sum(stack, group) == 10, 15,
                        "the lag to be measured at the new leader", explain=stack.explain)

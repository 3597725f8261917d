"""Issue 40: through the sidecar, an offset commit for a topic created a moment ago is accepted, as
a Kafka broker accepts it (coordinator.sidecar.topic_lookup).

The sidecars here refresh the upstream's metadata once a minute, so only the look-up can have
taught them a topic that was created upstream just before the commit. A rule broken on purpose to
watch these fail: `topics_to_look_up` returning () (no look-up): every raw round's commit then
answered UNKNOWN_TOPIC_OR_PARTITION; `HeldRequests.run` not holding the requests behind a held
one: the pipelined OffsetFetch read -1 before its commit.
"""

from __future__ import annotations

import asyncio
import datetime
import os
import time
import uuid
from types import SimpleNamespace
from typing import Any, cast

import pytest
from kio.schema.errors import ErrorCode

from coordinator.core.topics import TopicCatalog, TopicInfo, topics_to_look_up
from coordinator.sidecar.cluster_view import ClusterView
from coordinator.sidecar.topic_lookup import TopicLookup
from tests.support import realclients as rc
from tests.support.kafka import unique
from tests.support.sidecar_util import (
    RawClient,
    Stack,
    Upstream,
    commit,
    commit_request,
    decode,
    kio,
    offset_fetch_request,
    stack,
    upstream,
)

pytestmark = pytest.mark.clients
__all__ = ["stack", "upstream"]

ROUNDS = int(os.environ.get("GROUPCOORD_TOPIC_LOOKUP_ROUNDS", "100"))
CLIENT_ROUNDS = 4
NO_REFRESH = 60_000  # the periodic refresh must not be what teaches the sidecar the topic


# ------------------------------------------------------------------------------- the pure rule


def test_only_topics_or_partitions_the_catalog_cannot_vouch_for_are_looked_up() -> None:
    catalog = TopicCatalog([TopicInfo("known", uuid.uuid4(), 4)])
    assert topics_to_look_up(catalog, [("known", [0, 3])]) == ()
    assert topics_to_look_up(catalog, [("known", [4])]) == ("known",)  # partitions added since
    assert topics_to_look_up(catalog, [("new", [0]), ("new", [1]), ("known", [1])]) == ("new",)
    assert topics_to_look_up(catalog, [("bad name!", [0]), ("", [0])]) == ()


def test_an_answer_without_topic_ids_showing_a_new_topic_brings_the_refresh_forward() -> None:
    """What aiokafka's producer saw (Metadata v1-v5: no topic ids, so nothing to learn the topic
    from) brings the sidecar's refresh forward; a v10+ answer does not need to."""
    refreshes: list[int] = []
    view = ClusterView(cast(Any, None), 60_000, lambda: refreshes.append(1))

    def answer(**topic: Any) -> Any:
        return SimpleNamespace(brokers=(), topics=(SimpleNamespace(
            name="new", error_code=ErrorCode.none, partitions=(), **topic),))

    view.observe(answer(), full=False)  # no topic_id field at all: Metadata < v10
    assert refreshes == [1]
    view.observe(answer(topic_id=uuid.UUID(int=0)), full=False)  # v10+: never a refresh storm
    assert refreshes == [1]


async def test_look_ups_are_single_flight() -> None:
    """A look-up in flight serves every later one it covers; topics asked meanwhile are gathered
    into one next request."""
    asked: list[list[str]] = []
    gate = asyncio.Event()

    async def ask(names: list[str]) -> bytes:
        asked.append(names)
        await gate.wait()
        raise TimeoutError("no upstream here")

    lookup = TopicLookup(TopicCatalog(), ask, lambda response: None)
    first = lookup.look_up(["a", "b"])
    await rc.wait_until(lambda: asked, 5, "the first look-up to be sent")
    assert lookup.look_up(["a"]) is first
    later = [lookup.look_up(["b", "c"]), lookup.look_up(["d"])]
    assert later[0] is later[1] and later[0] is not first
    gate.set()
    await asyncio.wait_for(asyncio.gather(first, *later), 5)
    assert asked == [["a", "b"], ["b", "c", "d"]]


# --------------------------------------------------------------------- through a real sidecar


async def create_upstream(client: RawClient, topic: str, partitions: int) -> None:
    """CreateTopics straight to the upstream, then its Metadata until the topic has its leaders
    (what a producer waits for before it produces)."""
    request = kio(19, 5, "CreateTopicsRequest", timeout=datetime.timedelta(seconds=10),
                  validate_only=False, topics=(
                      kio(19, 5, "CreatableTopic", name=topic, num_partitions=partitions,
                          replication_factor=1, assignments=(), configs=()),))
    response = await client.call(request)
    assert response.topics[0].error_code == 0, response
    metadata = kio(3, 12, "MetadataRequest", allow_auto_topic_creation=False,
                   include_topic_authorized_operations=False,
                   topics=(kio(3, 12, "MetadataRequestTopic", topic_id=None, name=topic),))

    async def led() -> bool:
        answer = await client.call(metadata)
        t = answer.topics[0]
        return t.error_code == 0 and len(t.partitions) == partitions and all(
            p.leader_id >= 0 for p in t.partitions)

    await rc.wait_until(led, 30, f"the upstream to lead {topic}")


async def kafka_commit(port: int, topic: str, offsets: dict[int, int]) -> int:
    """`commit` straight to a one-node Kafka, once it coordinates a fresh group (the first
    FindCoordinator creates __consumer_offsets's partitions there): the error code."""
    group = unique("g-direct")
    codes: list[int] = []

    async def answered() -> bool:
        client = await RawClient.connect(port)
        try:
            await client.call(kio(10, 3, "FindCoordinatorRequest", key=group, key_type=0))
        finally:
            client.close()
        codes.append(await commit(port, group, topic, offsets))
        return codes[-1] not in (14, 15, 16)  # loading, not available, not coordinator

    await rc.wait_until(answered, 60, "Kafka to coordinate the group", interval=0.5,
                        explain=lambda: str(codes[-3:]))
    return codes[-1]


async def test_a_commit_right_after_its_topic_was_created_is_accepted(
        stack: Stack, upstream: Upstream) -> None:
    """ROUNDS fresh topics, each created upstream and committed to through the sidecar at once:
    every commit is accepted and read back, and a topic the upstream does not have is still
    UNKNOWN_TOPIC_OR_PARTITION (Kafka's answer), without being created by the look-up."""
    s = stack.sidecar(upstream.bootstrap, refresh_ms=NO_REFRESH)
    port = upstream.bootstrap.split(",")[0].rsplit(":", 1)[1]
    direct = await RawClient.connect(int(port))
    client = await RawClient.connect(s.port)
    try:
        for i in range(ROUNDS):
            topic, group = upstream.name(f"fresh-{i}"), upstream.name(f"fresh-group-{i}")
            await create_upstream(direct, topic, 2)
            # Pipelined: the OffsetFetch behind the held commit must see what it committed.
            await client.send(commit_request(group, topic, {0: i, 1: i + 1}),
                              offset_fetch_request(group, topic, 2))
            committed = decode(8, 8, await client.receive())
            codes = [p.error_code for t in committed.topics for p in t.partitions]
            assert codes == [0, 0], f"round {i}: commit answered {codes}"
            fetched = decode(9, 7, await client.receive())
            offsets = {p.partition_index: p.committed_offset for p in fetched.topics[0].partitions}
            assert offsets == {0: i, 1: i + 1}, f"round {i}: read back {offsets}"
        missing = upstream.name("never-created")
        assert await commit(s.port, upstream.name("g-missing"), missing, {0: 1}) == 3
        metadata = kio(3, 12, "MetadataRequest", allow_auto_topic_creation=False,
                       include_topic_authorized_operations=False,
                       topics=(kio(3, 12, "MetadataRequestTopic", topic_id=None, name=missing),))
        assert (await direct.call(metadata)).topics[0].error_code == 3  # not created
        if upstream.kind == "kafka":  # the reference: the same two commits straight to Kafka
            fresh = upstream.name("fresh-direct")
            await create_upstream(direct, fresh, 2)
            assert await kafka_commit(int(port), fresh, {0: 1, 1: 2}) == 0
            assert await kafka_commit(int(port), missing, {0: 1}) == 3
    finally:
        direct.close()
        client.close()


async def test_a_kip848_member_is_assigned_a_topic_created_a_moment_ago(
        stack: Stack, upstream: Upstream) -> None:
    """A ConsumerGroupHeartbeat subscribing to a topic created upstream just before: its first
    answer assigns the topic's partitions, as Kafka's would (not after the next refresh)."""
    s = stack.sidecar(upstream.bootstrap, refresh_ms=NO_REFRESH)
    port = upstream.bootstrap.split(",")[0].rsplit(":", 1)[1]
    direct = await RawClient.connect(int(port))
    client = await RawClient.connect(s.port)
    try:
        for i in range(5):
            topic = upstream.name(f"sub-{i}")
            await create_upstream(direct, topic, 3)
            response = await client.call(kio(
                68, 0, "ConsumerGroupHeartbeatRequest", group_id=upstream.name(f"sub-group-{i}"),
                member_id=f"m{i}", member_epoch=0, rebalance_timeout=datetime.timedelta(seconds=30),
                subscribed_topic_names=(topic,), topic_partitions=()))
            assert response.error_code == 0, response
            assigned = [p for tp in response.assignment.topic_partitions for p in tp.partitions]
            assert sorted(assigned) == [0, 1, 2], f"round {i}: {response}"
    finally:
        direct.close()
        client.close()


def _confluent_round(bootstrap: str, topic: str, group: str) -> None:
    """A confluent-kafka producer creates `topic` through the sidecar; a consumer joins, reads
    and commits synchronously at once. Any error raises."""
    from confluent_kafka import Consumer, KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap, "allow.auto.create.topics": True})
    producer.produce(topic, key=b"k", value=b"v")
    assert producer.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        message = None
        while message is None and time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error():
                raise KafkaException(message.error())
        assert message is not None, "no message within 30 s"
        for tp in consumer.commit(message=message, asynchronous=False) or []:
            assert tp.error is None, tp
    finally:
        consumer.close()


async def _aiokafka_round(bootstrap: str, topic: str, group: str) -> None:
    """The same with aiokafka (Metadata v1-v5: answers without topic ids, issue 40's case)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"v", key=b"k")
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=group,
                                auto_offset_reset="earliest", enable_auto_commit=False)
    await consumer.start()
    try:
        batch: dict[Any, Any] = {}
        async with asyncio.timeout(30):
            while not batch:
                batch = await consumer.getmany(timeout_ms=200)
        await consumer.commit()
    finally:
        await consumer.stop()


async def test_real_clients_commit_to_a_topic_they_just_created(
        stack: Stack, upstream: Upstream) -> None:
    """A handful of rounds with real clients: the producer auto-creates the topic through the
    sidecar, the consumer (initial rebalance delay 0) commits synchronously at once."""
    s = stack.sidecar(upstream.bootstrap, refresh_ms=NO_REFRESH)
    for i in range(CLIENT_ROUNDS):
        topic, group = upstream.name(f"made-{i}"), upstream.name(f"made-group-{i}")
        await asyncio.to_thread(_confluent_round, s.bootstrap, topic, group)
        topic, group = upstream.name(f"aio-made-{i}"), upstream.name(f"aio-made-group-{i}")
        await _aiokafka_round(s.bootstrap, topic, group)

"""The two servers of a conformance module: the shared Kafka 4.4 node and one groupcoord.

groupcoord is started once per module (like the `server` fixture: `groupcoord serve` with the same
defaults and the module's topics declared with `--topic name:N`); the same topics are created on
Kafka. Sequences keep apart by unique group ids (harness.Env.sequence), so one pair of servers
serves a whole module.
"""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conformance.harness import Env
from tests.support import realclients
from tests.support.sidecar_util import RawClient, kio

# Logical topic -> partitions, the same in every module.
TOPICS = {"t1": 3, "t2": 2, "t3": 6}
# groupcoord's options: those of tests/conftest.py's `server`, matching the Kafka fixture's
# group.initial.rebalance.delay.ms=0, group.min.session.timeout.ms=1000,
# group.consumer.heartbeat.interval.ms=1000, group.consumer.session.timeout.ms=10000 and
# group.consumer.assignment.interval.ms=0 (every target computed at once, on both sides); the
# classic max session timeout is Kafka's default, group.max.session.timeout.ms=1800000.
SERVER_OPTIONS = {"initial_rebalance_delay_ms": 0, "session_timeout_min_ms": 1000,
                  "session_timeout_max_ms": 1800000, "metrics_listen": "",
                  "consumer_heartbeat_interval_ms": 1000, "consumer_session_timeout_ms": 10000,
                  "consumer_assignment_interval_ms": 0}


async def _call(port: int, entity: Any) -> Any:
    client = await RawClient.connect(port)
    try:
        return await client.call(entity, timeout=30)
    finally:
        client.close()


async def _create_topics(port: int, topics: dict[str, int]) -> None:
    request = kio(19, 5, "CreateTopicsRequest", timeout=datetime.timedelta(seconds=30),
                  validate_only=False, topics=tuple(
                      kio(19, 5, "CreatableTopic", name=n, num_partitions=p, replication_factor=1,
                          assignments=(), configs=()) for n, p in topics.items()))
    response = await _call(port, request)
    bad = [(t.name, t.error_code) for t in response.topics if t.error_code not in (0, 36)]
    assert not bad, f"CreateTopics on Kafka failed: {bad}"


async def _topic_ids(port: int, names: list[str]) -> dict[str, uuid.UUID] | None:
    request = kio(3, 12, "MetadataRequest", allow_auto_topic_creation=False,
                  include_topic_authorized_operations=False,
                  topics=tuple(kio(3, 12, "MetadataRequestTopic", topic_id=None, name=n)
                               for n in names))
    response = await _call(port, request)
    out = {}
    for t in response.topics:
        if t.error_code or not t.partitions or any(p.leader_id < 0 for p in t.partitions):
            return None
        out[t.name] = t.topic_id
    return out


async def _wait_topics(port: int, names: list[str]) -> dict[str, uuid.UUID]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ids = await _topic_ids(port, names)
        if ids is not None:
            return ids
        await asyncio.sleep(0.1)  # a polling interval inside a deadline-bounded wait
    raise AssertionError(f"topics {names} never got leaders on 127.0.0.1:{port}")


async def _wait_coordinator(port: int) -> None:
    """Until every __consumer_offsets partition answers: FindCoordinator, then DescribeGroups, of
    enough group ids to hit all ten partitions, none with an error."""
    probes = tuple(f"conformance-probe-{i}" for i in range(64))
    deadline = time.monotonic() + 60
    codes: set[int] = set()
    while time.monotonic() < deadline:
        # FindCoordinator creates __consumer_offsets; DescribeGroups then finds it loaded.
        found = await _call(port, kio(10, 4, "FindCoordinatorRequest", key_type=0,
                                      coordinator_keys=probes))
        codes = {c.error_code for c in found.coordinators}
        if codes == {0}:
            response = await _call(port, kio(15, 5, "DescribeGroupsRequest", groups=probes,
                                             include_authorized_operations=False))
            codes = {g.error_code for g in response.groups}
        if codes == {0}:
            return
        await asyncio.sleep(0.1)  # a polling interval inside a deadline-bounded wait
    raise AssertionError(f"Kafka's group coordinator not ready: {codes}")


async def _wait_coordinator_sees(port: int, partitions: dict[str, int]) -> None:
    """Until Kafka's group coordinator (whose metadata image trails the broker's Metadata answer)
    assigns every partition of the new topics: a probe consumer group joins and leaves."""
    want = sum(partitions.values())
    deadline = time.monotonic() + 60
    got = -1
    while time.monotonic() < deadline:
        group, member = f"conformance-probe-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:22]
        beat = kio(68, 1, "ConsumerGroupHeartbeatRequest", group_id=group, member_id=member,
                   member_epoch=0, instance_id=None, rack_id=None,
                   rebalance_timeout=datetime.timedelta(seconds=30),
                   subscribed_topic_names=tuple(partitions), subscribed_topic_regex=None,
                   server_assignor=None, topic_partitions=())
        answer = await _call(port, beat)
        got = sum(len(tp.partitions) for tp in answer.assignment.topic_partitions) \
            if answer.assignment else -1
        await _call(port, kio(68, 1, "ConsumerGroupHeartbeatRequest", group_id=group,
                              member_id=member, member_epoch=-1, instance_id=None, rack_id=None,
                              rebalance_timeout=datetime.timedelta(seconds=30),
                              subscribed_topic_names=None, subscribed_topic_regex=None,
                              server_assignor=None, topic_partitions=None))
        if got == want:
            return
        await asyncio.sleep(0.1)  # a polling interval inside a deadline-bounded wait
    raise AssertionError(f"Kafka's group coordinator assigns {got} of {want} new partitions")


async def _prepare(kafka_port: int, gc_port: int, topics: dict[str, str]) -> Env:
    partitions = {topics[t]: n for t, n in TOPICS.items()}
    await _create_topics(kafka_port, partitions)
    await _wait_coordinator(kafka_port)
    names = list(partitions)
    k_ids = await _wait_topics(kafka_port, names)
    await _wait_coordinator_sees(kafka_port, partitions)
    g_ids = await _wait_topics(gc_port, names)
    back = {v: k for k, v in topics.items()}
    env = Env(kafka_port, gc_port, topics, dict(TOPICS), prefix=_prefix(topics))
    env.topic_ids = {"kafka": {back[n]: i for n, i in k_ids.items()},
                     "groupcoord": {back[n]: i for n, i in g_ids.items()}}
    return env


def _prefix(topics: dict[str, str]) -> str:
    logical, actual = next(iter(topics.items()))
    return actual[: -len(logical)]


@pytest.fixture(scope="module")
def env(_kafka_session: Any, peers_dir: Path, tmp_path_factory: pytest.TempPathFactory
        ) -> Iterator[Env]:
    _kafka_session.heal()
    prefix = f"c{uuid.uuid4().hex[:8]}x"  # letters and digits: usable as is inside a regex
    topics = {t: prefix + t for t in TOPICS}
    broker = realclients.start_broker(tmp_path_factory.mktemp("conformance"), peers_dir,
                                      {topics[t]: n for t, n in TOPICS.items()},
                                      dict(SERVER_OPTIONS), [])
    try:
        kafka_port = int(_kafka_session.nodes[0].port)
        yield asyncio.run(_prepare(kafka_port, broker.port, topics))
    finally:
        broker.stop()


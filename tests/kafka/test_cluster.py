"""The Kafka clusters the upstream suites run against: both start from `make peers`' jars, carry
records, and come back whole after a test kills one of their nodes."""

from __future__ import annotations

import signal

from tests.support import sidecar_util as su
from tests.support.kafka import KafkaCluster, unique


async def test_single_node_carries_records(kafka: KafkaCluster) -> None:
    topic = unique("smoke")
    await su.create_topic(kafka.bootstrap, topic, 3)
    await su.produce(kafka.bootstrap, topic, ["a", "b", "c"])


async def test_three_nodes_survive_a_kill_and_heal(kafka3: KafkaCluster) -> None:
    assert len(kafka3.nodes) == 3
    topic = unique("smoke")
    await su.create_topic(kafka3.bootstrap, topic, 3, replication=3)
    kafka3.kill(2, signal.SIGKILL)
    live = ",".join(n.address for n in kafka3.nodes[:2])
    # Two of three controller voters keep the quorum: the cluster still takes writes.
    await su.produce(live, topic, ["a", "b", "c"], request_timeout_ms=30000)
    kafka3.heal()
    assert all(n.alive() for n in kafka3.nodes)

"""A sidecar whose upstream cannot be reached, as its clients see it (coordinator.sidecar.dark):
connections stay open, answers are Kafka's retriable errors, clients stay quiet and carry on
without a restart when the upstream comes up.

The upstream is tansu behind a Relay that advertises the relay's port: a stopped relay is an
upstream broker that cannot be reached; started again, it is back at the same address."""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from kio.schema.errors import ErrorCode

from tests.support import realclients as rc
from tests.support.sidecar_util import (
    HOST,
    RawClient,
    Relay,
    Sidecar,
    Stack,
    create_topic,
    metadata,
    produce_request,
    readyz,
    stack,
)

pytestmark = pytest.mark.clients
__all__ = ["stack"]  # the fixture

QUIET_S = 10.0


class _Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def connections(s: Sidecar, metric: str = "groupcoord_connections") -> int:
    found = re.search(rf"^{metric} (\S+)", s.metrics(), re.M)
    assert found is not None
    return int(float(found.group(1)))


async def dark_upstream(stack: Stack, topic: str, *, reached: bool,
                        fleet: bool = False) -> tuple[Relay, Sidecar]:
    """tansu with `topic`, behind a relay that is then stopped, and a sidecar in front of the
    relay (`fleet`: the default, a fleet member; else --state local): one that knew the upstream
    and the topic before it went dark (`reached`), or one started after, that never reached it."""
    port = rc.free_port()
    tansu = stack.tansu(advertised=port)
    relay = await stack.relay(tansu.port, port)
    sidecar = stack.sidecar(f"{HOST}:{port}", fleet=fleet) if reached else None
    await create_topic(f"{HOST}:{port}", topic, 2)
    if sidecar is not None:
        await rc.wait_until(lambda: sidecar.upstream()["topics"] >= 1, 30, "the sidecar to "
                            "learn the topic")
    await relay.stop()
    if sidecar is None:
        sidecar = stack.sidecar(f"{HOST}:{port}", fleet=fleet)
    else:
        await rc.wait_until(lambda: readyz(sidecar)[0] == 503, 30, "the sidecar to see it")
    return relay, sidecar


@pytest.mark.parametrize(("fleet", "reached"), [(False, True), (True, True), (False, False)],
                         ids=["state-local", "fleet", "never-reached"])
async def test_clients_of_a_sidecar_whose_upstream_is_down_wait_quietly_then_flow(
        stack: Stack, fleet: bool, reached: bool):
    topic = "dark-topic"
    relay, sidecar = await dark_upstream(stack, topic, reached=reached, fleet=fleet)
    errors = _Errors()
    aiokafka_log = logging.getLogger("aiokafka")
    aiokafka_log.addHandler(errors)
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=sidecar.bootstrap, group_id="dark-g",
                                auto_offset_reset="earliest", metadata_max_age_ms=1000)
    producer = AIOKafkaProducer(bootstrap_servers=sidecar.bootstrap, request_timeout_ms=5000)
    confluent_errors: list[str] = []
    got_confluent: list[bytes] = []
    stop = threading.Event()

    def confluent_consume() -> None:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": sidecar.bootstrap, "group.id": "dark-c",
                      "auto.offset.reset": "earliest",
                      "error_cb": lambda e: confluent_errors.append(str(e))})
        c.subscribe([topic])
        try:
            while not stop.is_set():
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    got_confluent.append(m.value())
        finally:
            c.close()

    confluent = asyncio.get_running_loop().run_in_executor(None, confluent_consume)
    # --state local forms the group while the upstream is dark; a fleet member cannot (its
    # state is upstream) and answers its retriable errors until it is back. Never reached, the
    # topic's partitions are unknown: aiokafka waits for them (up to its request_timeout_ms).
    starting = asyncio.ensure_future(consumer.start())
    try:
        await asyncio.wait_for(producer.start(), 30)  # ApiVersions, Metadata answered
        loop = asyncio.get_running_loop()
        deadline = loop.time() + QUIET_S
        accepted = None  # at half time, once the clients opened what they open
        while loop.time() < deadline:
            assert not errors.lines, errors.lines
            await asyncio.sleep(0.5)  # watching for QUIET_S: nothing must happen meanwhile
            if accepted is None and loop.time() > deadline - QUIET_S / 2:
                accepted = connections(sidecar, "groupcoord_connections_accepted_total")
        assert not errors.lines, errors.lines
        assert not confluent_errors, confluent_errors
        assert starting.done() == (reached and not fleet), starting
        # Kept open: the clients' connections stay, no new ones replace them (a closed one
        # would be reconnected within the half window: aiokafka retries every retry_backoff).
        assert connections(sidecar) >= 2
        assert connections(sidecar, "groupcoord_connections_accepted_total") == accepted
        status, why = readyz(sidecar)
        assert status == 503 and "unreachable" in why, (status, why)

        await relay.start()  # the upstream comes up: no client is restarted
        await asyncio.wait_for(starting, 60)
        await asyncio.wait_for(producer.send_and_wait(topic, b"after", partition=0), 60)
        record = await asyncio.wait_for(consumer.getone(), 60)
        assert record.value == b"after"
        if reached:  # (never reached: librdkafka may lose its join's Metadata request when it
            # swaps its bootstrap broker for the real ones, and then waits for its periodic
            # refresh, minutes; see the report of this change)
            await rc.wait_until(lambda: bool(got_confluent), 60, "the confluent consumer's "
                                "record")
            assert got_confluent == [b"after"]
        assert not errors.lines, errors.lines
    finally:
        stop.set()
        starting.cancel()
        aiokafka_log.removeHandler(errors)
        await consumer.stop()
        await producer.stop()
        await confluent


async def test_a_never_reached_upstream_answers_retriable_errors_on_an_open_connection(
        stack: Stack):
    """The same, byte for byte with a raw client: Metadata and Produce answered, not closed."""
    topic = "dark-raw"
    relay, sidecar = await dark_upstream(stack, topic, reached=False)
    client = await RawClient.connect(sidecar.port)
    try:
        answer: Any = await client.call(metadata([topic, "never-seen"]))
        assert answer.brokers == ()  # never reached: none known (sidecar.dark says why)
        # Never reached: no topic known; LEADER_NOT_AVAILABLE, as for a topic being created.
        assert [(t.name, t.error_code, t.partitions) for t in answer.topics] == [
            (topic, ErrorCode.leader_not_available, ()),
            ("never-seen", ErrorCode.leader_not_available, ())]
        produced: Any = await client.call(produce_request(topic, 0, ["x"]))
        [part] = produced.responses[0].partition_responses
        assert part.error_code == ErrorCode.not_leader_or_follower
        await relay.start()

        async def led() -> bool:
            again: Any = await client.call(metadata([topic]))
            return all(p.error_code == ErrorCode.none for p in again.topics[0].partitions)

        await rc.wait_until(led, 30, "the same connection to see the leaders again")
    finally:
        client.close()

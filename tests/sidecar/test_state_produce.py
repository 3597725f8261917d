"""The fleet's own Produce path for state records (coordinator.sidecar.state_produce), against a
real tansu and Apache Kafka 4.4 behind a scripted relay (tests/support/produce_script.py) that can
hold the broker's answers or refuse a write itself:

- a batch is acknowledged (its appends durable, their replies released) only once the upstream
  acknowledged it;
- a refused batch fails every append in it (the runtime then answers each commit
  NOT_COORDINATOR, which clients retry: tests/serve/test_runtime_partial_loss.py), and a
  retriable error is retried until the write is acknowledged;
- order is kept per partition, across pipelined requests and retries; each Produce carries one
  batch per partition, many partitions' batches together.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from coordinator.core.record_codec import encode_record
from coordinator.core.records import OffsetCommitKey, OffsetCommitValue, Record
from coordinator.sidecar.fleet_journal import FleetJournal
from coordinator.sidecar.state_topic import (
    Claim,
    StateTopic,
    StateUnavailable,
    headers,
    partition_for,
    record_batches,
)
from coordinator.sidecar.upstream_clients import client_options
from tests.support import realclients as rc
from tests.support.produce_script import ProduceScript
from tests.support.sidecar_util import HOST, Stack, Upstream, stack, upstream

__all__ = ["stack", "upstream"]

PARTITIONS = 6
CLAIM = Claim(1, "A", "a:9094")


@pytest.fixture
async def relay(stack: Stack, upstream: Upstream) -> AsyncIterator[ProduceScript]:
    script = ProduceScript(rc.free_port(), upstream.port)
    await script.start()
    stack.relays.append(script)
    yield script


@pytest.fixture
async def topic(relay: ProduceScript, upstream: Upstream) -> AsyncIterator[StateTopic]:
    """A state topic whose every connection (aiokafka's and the records' own) is the relay."""
    name = upstream.name("produce-test")
    t = StateTopic(name, PARTITIONS, -1, 0, lambda: client_options(f"{HOST}:{relay.port}"))
    await t.start()
    try:
        yield t
    finally:
        await t.stop()


def commit(group: str, offset: int) -> Record:
    return Record(OffsetCommitKey(group, "t", 0), OffsetCommitValue(offset, -1, "", 1, None))


def groups_on(partition: int, n: int = 1) -> list[str]:
    names = (f"g{i}" for i in range(10_000))
    return [g for g in names if partition_for(g, PARTITIONS) == partition][:n]


async def writer_for(topic: StateTopic, journal: FleetJournal, partition: int,
                     failures: list[BaseException]) -> None:
    offset = await topic.write_claim(partition, CLAIM)
    journal.new_writer(topic, partition, CLAIM, offset + 1, {},
                       lambda _w, exc: failures.append(exc))


async def offsets_read(topic: StateTopic, partition: int) -> list[int]:
    """The committed offsets in the partition, in log order (claims left out)."""
    read, _ = await topic.read({partition: 0})
    out = []
    for record in read[partition]:
        if record.key is not None and not record.key.startswith(b"\xff\xff"):
            value: Any = record.value
            out.append(int.from_bytes(value[2:10], "big"))  # OffsetCommitValue: version, offset
    return out


async def test_a_batch_is_acknowledged_only_once_the_upstream_acknowledged_it(
    topic: StateTopic, relay: ProduceScript
) -> None:
    journal, failures = FleetJournal(PARTITIONS), []
    [group] = groups_on(2)
    await writer_for(topic, journal, 2, failures)
    relay.hold()
    seq = journal.append([commit(group, 5)])
    await rc.wait_until(lambda: relay.held >= 1, 20, "the broker's answer to be held")
    # The broker has written it and answered (the request went out before): not durable
    # until that answer arrives.
    assert journal.durable_seq() < seq and not journal.lost(seq)
    relay.release()
    await asyncio.wait_for(journal.wait_durable(seq), 20)
    assert not journal.lost(seq) and not failures
    assert await offsets_read(topic, 2) == [5]


async def test_a_refused_batch_fails_every_append_in_it(
    topic: StateTopic, relay: ProduceScript
) -> None:
    journal, failures = FleetJournal(PARTITIONS), []
    [group] = groups_on(3)
    await writer_for(topic, journal, 3, failures)
    relay.hold()
    first = journal.append([commit(group, 1)])
    await rc.wait_until(lambda: relay.held >= 1, 20, "the first write's answer to be held")
    # These wait behind the write in flight, and go out together as the next batch: refused.
    behind = [journal.append([commit(group, o)]) for o in range(2, 7)]
    relay.refuse.append(ErrorCode.invalid_record.value)  # not retriable
    relay.release()
    await asyncio.wait_for(journal.wait_durable(first), 20)
    assert not journal.lost(first)
    for seq in behind:
        with pytest.raises(StateUnavailable):
            await asyncio.wait_for(journal.wait_durable(seq), 20)
        assert journal.lost(seq)
    assert relay.produced[-1] == [(3, 5)]  # the five in one batch, refused once, not retried
    assert len(failures) == 1 and "INVALID_RECORD" in str(failures[0])
    assert await offsets_read(topic, 3) == [1]


async def test_a_retriable_error_is_retried_until_acknowledged(
    topic: StateTopic, relay: ProduceScript
) -> None:
    journal, failures = FleetJournal(PARTITIONS), []
    [group] = groups_on(4)
    await writer_for(topic, journal, 4, failures)
    relay.refuse += [ErrorCode.not_leader_or_follower.value] * 2
    seq = journal.append([commit(group, 8)])
    await asyncio.wait_for(journal.wait_durable(seq), 20)
    assert not journal.lost(seq) and not failures
    assert not relay.refuse and len(relay.produced) >= 3
    assert await offsets_read(topic, 4) == [8]


async def test_order_is_kept_per_partition_across_retries_and_pipelined_requests(
    topic: StateTopic, relay: ProduceScript
) -> None:
    """The producer alone (no PartitionWriter serializing for it): batches sent at once for the
    same partitions land in the order sent, even when the first one's write is refused once
    with a retriable error and the others could overtake it."""
    assert topic.records.max_in_flight >= 2  # pipelined: a later request could overtake
    for p in range(PARTITIONS):
        await topic.write_claim(p, CLAIM)
    relay.refuse.append(ErrorCode.not_leader_or_follower.value)  # the first request
    sends = []
    for offset in range(10):
        for p in range(PARTITIONS):
            [(batch, _)] = record_batches([encode_record(commit(groups_on(p)[0], offset))],
                                          headers(CLAIM))
            sends.append(topic.records.send(p, batch))
    bases = await asyncio.wait_for(asyncio.gather(*sends), 30)
    for p in range(PARTITIONS):
        mine = bases[p::PARTITIONS]
        assert mine == sorted(mine), (p, mine)
        assert await offsets_read(topic, p) == list(range(10))
    for request in relay.produced:
        partitions = [p for p, _ in request]
        assert len(partitions) == len(set(partitions)), request  # one batch per partition
    # Batches of many partitions share a request (fewer requests than batches).
    assert len(relay.produced) < 10 * PARTITIONS, len(relay.produced)


async def test_a_write_whose_connection_closes_is_retried_and_its_second_copy_examined(
    topic: StateTopic, relay: ProduceScript
) -> None:
    """The broker wrote the batch but its answer never came (the connection closed): the write
    is retried on a new connection, lands again after the offset its writer expected, and the
    writer finds its own first copy there (not a stale owner's record: nothing to repair)."""
    journal, failures = FleetJournal(PARTITIONS), []
    [group] = groups_on(5)
    await writer_for(topic, journal, 5, failures)
    relay.hold()
    seq = journal.append([commit(group, 3)])
    await rc.wait_until(lambda: relay.held >= 1, 20, "the broker's answer to be held")
    await relay.stop()  # every relayed connection reset, the answer with it
    relay.release()
    await relay.start()
    await asyncio.wait_for(journal.wait_durable(seq), 20)
    assert not journal.lost(seq) and not failures
    assert await offsets_read(topic, 5) == [3, 3]  # written twice, both ours
    writer = journal.writers[5]
    assert getattr(writer, "repaired_keys", None) == 0
    seq = journal.append([commit(group, 4)])  # and the writer goes on where the log ends
    await asyncio.wait_for(journal.wait_durable(seq), 20)
    assert await offsets_read(topic, 5) == [3, 3, 4] and not failures

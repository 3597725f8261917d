"""The fleet's state partitions against a real tansu and Apache Kafka 4.4 (group placement and
the partitions' assignment, pure, are pinned in test_pin_rules.py): persist-then-reply through the
FleetJournal, the fence (a former owner's write fails and replay ignores it), and the
compaction-hole repair (the owner rewrites a key a former owner wrote last)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from coordinator.core.record_codec import encode_record
from coordinator.core.records import OffsetCommitKey, OffsetCommitValue, Record
from coordinator.sidecar.fleet_journal import FleetJournal, PartitionWriter
from coordinator.sidecar.state_topic import (
    Claim,
    Fenced,
    Replay,
    StateTopic,
    StateUnavailable,
    partition_for,
    writer_of,
)
from coordinator.sidecar.upstream_clients import client_options
from tests.support.sidecar_util import Upstream, stack, upstream

__all__ = ["stack", "upstream"]

PARTITIONS = 3
GROUP = "fenced-group"


def test_the_default_fleet_session_fits_a_stock_kafka() -> None:
    """The fleet is a classic consumer group on the upstream: a stock Kafka refuses a session
    below group.min.session.timeout.ms (6000 by default) with INVALID_SESSION_TIMEOUT, and the
    members' aiokafka clients then never join (the 4 s default formed no fleet there)."""
    from coordinator.serve.config import SETTINGS
    from coordinator.sidecar.fleet import FleetOptions

    [setting] = [s for s in SETTINGS if s.name == "fleet_session_timeout_ms"]
    assert setting.default >= 6_000
    assert FleetOptions("x:9092").session_timeout_ms >= 6_000


def commit(offset: int) -> Record:
    return Record(OffsetCommitKey(GROUP, "t", 0), OffsetCommitValue(offset, -1, "", 1, None))


@pytest.fixture
async def topic(upstream: Upstream, tmp_path: Path) -> AsyncIterator[StateTopic]:
    name = upstream.name("state-test")
    t = StateTopic(name, PARTITIONS, -1, 0, lambda: client_options(upstream.bootstrap))
    await t.start()
    try:
        yield t
    finally:
        await t.stop()


async def load(topic: StateTopic, partition: int) -> tuple[Replay, int]:
    read, ends = await topic.read({partition: 0})
    replay = Replay()
    for r in read[partition]:
        replay.feed(r.key, r.value, r.headers)
    return replay, ends[partition]


def owner(topic: StateTopic, journal: FleetJournal, claim: Claim, partition: int,
          next_offset: int, latest: dict[bytes, bytes | None],
          failures: list[BaseException]) -> PartitionWriter:
    return journal.new_writer(topic, partition, claim, next_offset, latest,
                              lambda _w, exc: failures.append(exc))


async def test_a_former_owner_is_fenced_and_its_late_write_is_repaired(
    topic: StateTopic,
) -> None:
    p = partition_for(GROUP, PARTITIONS)
    # Member A owns the partition (epoch 1) and commits offset 5: durable, acknowledged.
    a_claim = Claim(1, "A", "a:9094")
    a_off = await topic.write_claim(p, a_claim)
    a_journal, a_failures = FleetJournal(PARTITIONS), []
    owner(topic, a_journal, a_claim, p, a_off + 1, {}, a_failures)
    seq = a_journal.append([commit(5)])
    await asyncio.wait_for(a_journal.wait_durable(seq), 10)
    assert not a_journal.lost(seq) and a_journal.durable_seq() >= seq

    # The fleet moves the partition to B (generation 2): B claims, reads, sees A's offset 5.
    b_claim = Claim(2, "B", "b:9094")
    await topic.write_claim(p, b_claim)
    replay, end = await load(topic, p)
    assert replay.claim == b_claim
    assert [r.value.offset for r in replay.records()] == [5]  # type: ignore[union-attr]
    b_journal, b_failures = FleetJournal(PARTITIONS), []
    b_writer = owner(topic, b_journal, b_claim, p, end, replay.latest, b_failures)

    # A wakes (it was paused) and writes offset 7: the write lands after B's claim, so A finds
    # B's claim in between, is fenced, and the reply that depended on it is never released.
    seq = a_journal.append([commit(7)])
    with pytest.raises(StateUnavailable):
        await asyncio.wait_for(a_journal.wait_durable(seq), 10)
    assert a_journal.lost(seq)
    assert len(a_failures) == 1 and isinstance(a_failures[0], Fenced)
    # And A can write nothing more on that partition.
    later = a_journal.append([commit(8)])
    assert a_journal.lost(later)

    # Whoever reads the partition still sees 5: A's 7 is not B's epoch.
    replay, _ = await load(topic, p)
    assert [r.value.offset for r in replay.records()] == [5]  # type: ignore[union-attr]
    # But A's record is the key's latest: compaction would drop the valid value. B's periodic
    # verify finds it and rewrites the key's valid value after it.
    assert replay.dirty
    ends = await topic.end_offsets([p])
    await b_writer.verify(ends[p], time.monotonic())
    assert b_writer.repaired_keys == 1 and not b_failures
    read, _ = await topic.read({p: 0})
    last = [r for r in read[p] if r.key == replay.dirty.copy().pop()][-1]
    assert writer_of(last.headers) == (2, "B")
    replay, _ = await load(topic, p)
    assert not replay.dirty
    assert [r.value.offset for r in replay.records()] == [5]  # type: ignore[union-attr]

    # B goes on committing normally.
    seq = b_journal.append([commit(9)])
    await asyncio.wait_for(b_journal.wait_durable(seq), 10)
    replay, _ = await load(topic, p)
    assert [r.value.offset for r in replay.records()] == [9]  # type: ignore[union-attr]


async def test_appends_are_batched_per_partition_and_fail_only_where_they_failed(
    topic: StateTopic,
) -> None:
    claim = Claim(1, "A", "a:9094")
    journal, failures = FleetJournal(PARTITIONS), []
    mine = partition_for(GROUP, PARTITIONS)
    off = await topic.write_claim(mine, claim)
    writer = owner(topic, journal, claim, mine, off + 1, {}, failures)
    seqs = [journal.append([commit(i)]) for i in range(200)]
    # A group on a partition this member does not own: that append alone is lost.
    other = next(g for g in (f"g{i}" for i in range(100))
                 if partition_for(g, PARTITIONS) != mine)
    foreign = journal.append([Record(OffsetCommitKey(other, "t", 0),
                                     OffsetCommitValue(1, -1, "", 1, None))])
    await asyncio.wait_for(journal.wait_durable(seqs[-1]), 10)
    assert not any(journal.lost(s) for s in seqs)
    with pytest.raises(StateUnavailable):
        await journal.wait_durable(foreign)
    assert journal.lost(foreign)
    read, _ = await topic.read({mine: 0})
    # One claim and 200 commits, in far fewer produce requests than commits: while one write
    # is in flight the next appends wait and go out together.
    assert len(read[mine]) == 201
    assert writer.batches <= 20, writer.batches
    replay, _ = await load(topic, mine)
    assert [r.value.offset for r in replay.records()] == [199]  # type: ignore[union-attr]


# -- two members claiming with the SAME epoch (one ahead of or behind the fleet's generation): the
# first claim in log order keeps the partition for readers, and its writer stops all the same, so
# nobody writes on until the next generation's claim. Broken together, these two let a member go
# on writing a partition it lost.


async def test_a_claim_of_the_same_epoch_by_another_member_fences_the_writer(
    topic: StateTopic,
) -> None:
    p = partition_for(GROUP, PARTITIONS)
    a_claim = Claim(3, "A", "a:9094")
    a_off = await topic.write_claim(p, a_claim)
    journal, failures = FleetJournal(PARTITIONS), []
    owner(topic, journal, a_claim, p, a_off + 1, {}, failures)
    seq = journal.append([commit(5)])
    await asyncio.wait_for(journal.wait_durable(seq), 10)
    assert not journal.lost(seq)

    await topic.write_claim(p, Claim(3, "B", "b:9094"))  # B claims with A's epoch

    # A's next write lands after B's claim: A finds it there and stops, its reply never released.
    seq = journal.append([commit(7)])
    with pytest.raises(StateUnavailable):
        await asyncio.wait_for(journal.wait_durable(seq), 10)
    assert journal.lost(seq)
    assert len(failures) == 1 and isinstance(failures[0], Fenced), failures
    assert journal.lost(journal.append([commit(8)]))  # and writes nothing more there


async def test_on_replay_a_claim_of_an_equal_epoch_does_not_take_the_partition(
    topic: StateTopic,
) -> None:
    p = partition_for(GROUP, PARTITIONS)
    a_claim, b_claim = Claim(3, "A", "a:9094"), Claim(3, "B", "b:9094")
    await topic.write_claim(p, a_claim)
    await topic.send(p, [encode_record(commit(5))], a_claim)
    # B claims with the same epoch and, believing it owns the partition, writes under its claim.
    await topic.write_claim(p, b_claim)
    await topic.send(p, [encode_record(commit(9))], b_claim)

    replay, _ = await load(topic, p)
    # The first claim of the epoch stands: B's claim does not win its load (B does not serve),
    # and what B wrote under it counts for nobody (a foreign record, to be repaired).
    assert replay.claim == a_claim
    assert [r.value.offset for r in replay.records()] == [5]  # type: ignore[union-attr]
    assert replay.dirty == {encode_record(commit(9))[0]}

"""A KIP-848 group deleted (DeleteGroups of an Empty group, or the downgrade to a classic group
when its last consumer-protocol member goes), pinned where `make mutation` found it loose: the
deletion forgets the group's soft state with it (a pending assignment timer, the assignment
pace, a regex waiting to be resolved, its topic hashes, its rebalance under way), so the same
id used again starts over as a new group, as in Kafka where the deleted group object is gone."""

from __future__ import annotations

from coordinator.core.consumer import ConsumerGroupConfig
from coordinator.core.consumer.messages import ConsumerGroupHeartbeat, HeartbeatResponse
from coordinator.core.events import RebalanceCompleted
from coordinator.core.messages import ErrorCode, SyncGroup, SyncGroupResult
from tests.core.test_consumer_migration import T, classic_group, consumer_join, core, reply
from tests.core.test_consumer_support import Harness

INTERVAL_MS = 1_000


def paced() -> Harness:
    return Harness(config=ConsumerGroupConfig(assignment_interval_ms=INTERVAL_MS))


def test_a_deleted_groups_id_starts_over_as_a_new_group() -> None:
    h = paced()
    a = h.client("a")
    h.poll(a)  # assigned at once
    b = h.client("b", topics=None, regex="pay.*")
    h.poll(b)  # inside the interval: a run waits for a timer, and the new regex for a heartbeat
    h.leave(a)
    h.leave(b)
    assert h.core.delete_group("g")[0] is ErrorCode.none
    assert "g" not in h.core.groups
    assert h.core.next_deadline_ms() is None  # the deleted group's run is not waited for
    # The same id joined again, still inside the deleted group's interval, answers and writes
    # what the first join of a new group does.
    fresh = paced()
    fresh.clock.now = h.clock.now
    written = len(h.records)
    again = h.poll(h.client("c", topics=None, regex="pay.*"))
    first = fresh.poll(fresh.client("c", topics=None, regex="pay.*"))
    assert again == first
    assert h.records[written:] == fresh.records
    for harness in (h, fresh):
        harness.poll(harness.clients["c"])  # the regex resolved: a bump inside the interval
        harness.advance(INTERVAL_MS)  # the run at its end
        harness.poll(harness.clients["c"])
    assert h.records[written:] == fresh.records
    assert h.clients["c"].owned == fresh.clients["c"].owned != {}


def test_a_downgrade_forgets_the_consumer_groups_hashes_and_rebalance() -> None:
    c = core()
    clients = classic_group(c)
    consumer_join(c, "n1", 0)
    for cl in clients:
        cl.rejoin(50)
        cl.sync(50)
    assert c.consumer._hashes.readers(T) == {"g"}
    reply(c.handle(1, ConsumerGroupHeartbeat("g", "n1", -1), 100))  # the downgrade
    assert "g" not in c.consumer.groups
    # No topic hash is kept for a group the consumer coordinator no longer has.
    assert not c.consumer._hashes.readers(T) and T not in c.consumer._hashes
    # Upgraded again later: its rebalance starts with that upgrade, not with the old one.
    response, fx = consumer_join(c, "n2", 5_000)
    assert isinstance(response, HeartbeatResponse) and response.error is ErrorCode.none
    events = list(fx.events)
    now = 5_000
    for _ in range(20):
        if any(isinstance(e, RebalanceCompleted) for e in events):
            break
        now += 100
        for cl in clients:  # the classic members rejoin and sync, as Classic does
            fx = c.handle(1, cl.join_cmd(), now)
            cl.joined(reply(fx))  # type: ignore[arg-type]
            events += fx.events
            fx = c.handle(1, SyncGroup("g", cl.generation, cl.member_id, None, "consumer",
                                       cl.protocol, (), 5), now)  # fmt: skip
            synced = reply(fx)
            assert isinstance(synced, SyncGroupResult)
            if synced.error is ErrorCode.none:
                cl.take(synced.assignment)
            events += fx.events
        n2 = c.consumer.groups["g"].members["n2"]
        fx = c.handle(1, ConsumerGroupHeartbeat("g", "n2", n2.member_epoch, topic_partitions=()),
                      now)  # fmt: skip
        events += fx.events
    completed = [e for e in events if isinstance(e, RebalanceCompleted)]
    assert completed and completed[0].started_ms == 5_000

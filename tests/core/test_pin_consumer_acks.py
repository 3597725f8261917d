"""member_update.AssignmentAcks, pinned for mutation testing: which heartbeat answers carry the
member's assignment. Kafka's rule (a join, a full request, a change) for a member with nothing
unacknowledged, and our repeat of an answer that handed partitions until the member reports
owning them (issue 38; the flows are tests/core/test_consumer_flows.py's)."""

from __future__ import annotations

from coordinator.core.consumer import HeartbeatResponse
from tests.core.test_consumer_support import Client, Harness


def handed_over(h: Harness) -> tuple[Client, HeartbeatResponse]:
    """b joins a group of one with nothing free, acknowledges its empty assignment (nothing
    left to repeat), then a revokes and b's epoch-only beat (librdkafka's steady state) is
    answered with two partitions."""
    a, b = h.client("a"), h.client("b")
    h.poll(a)
    h.poll(b)
    assert h.send(member_id="b", member_epoch=b.epoch, topic_partitions=()).assignment is None
    h.poll(a)  # asked to revoke two
    h.poll(a)  # revoked
    lost = h.send(member_id="b", member_epoch=b.epoch, topic_partitions=None)
    assert lost.assignment is not None and sum(len(tp.partitions) for tp in lost.assignment) == 2
    return b, lost


def test_an_answer_handing_partitions_is_repeated_though_the_member_was_acknowledged() -> None:
    h = Harness(topics=(("orders", 4),))
    b, lost = handed_over(h)
    for owned in (None, (), None):
        r = h.send(member_id="b", member_epoch=b.epoch, topic_partitions=owned)
        assert r.assignment == lost.assignment


def test_the_heartbeat_reporting_them_gets_nothing_and_ends_the_repeats() -> None:
    h = Harness(topics=(("orders", 4),))
    b, lost = handed_over(h)
    r = h.send(member_id="b", member_epoch=b.epoch, topic_partitions=lost.assignment)
    assert r.error.name == "none" and r.assignment is None  # nothing changed, nothing due
    assert h.send(member_id="b", member_epoch=b.epoch, topic_partitions=None).assignment is None


def test_a_fleet_move_forgets_the_repeats() -> None:
    """Soft state: a group unloaded (its state partition moved) and loaded again answers as
    Kafka does, the member's next epoch-only beat without its assignment."""
    h = Harness(topics=(("orders", 4),))
    b, _ = handed_over(h)
    h.core.unload_group("g")
    for record in h.records:
        h.core.replay(record)
    h.core.finish_loading(h.clock.now, ["g"])
    assert h.send(member_id="b", member_epoch=b.epoch, topic_partitions=None).assignment is None


def settled(client: Client) -> tuple[Harness, Client, HeartbeatResponse]:
    """One member that owns the whole topic and has reported it: nothing to repeat."""
    h = Harness(topics=(("orders", 4),))
    h.clients[client.member_id] = client
    h.settle()
    for _ in range(5):  # a regex is resolved on a later beat (a new epoch, reported after)
        first = h.poll(client)
        if first.assignment is None:
            break
    assert first.assignment is None and len(client.owned_set()) == 4
    return h, client, first


def test_kafkas_rule_a_full_request_gets_the_assignment() -> None:
    """Every optional field present (the Java consumer's request after an error): answered with
    the assignment though nothing changed; by names and by regex."""
    for client in (Client("a"), Client("a", topics=None, regex="ord.*")):
        h, a, _ = settled(client)
        r = h.poll(a, full=True)
        assert r.assignment is not None and {
            (tp.topic_id, p) for tp in r.assignment for p in tp.partitions
        } == a.owned_set()
        assert h.poll(a).assignment is None  # the steady beat after it: nothing


def test_a_request_missing_one_field_of_a_full_one_gets_nothing() -> None:
    h, a, _ = settled(Client("a"))
    owned = a.owned_tps()
    for fields in (
        {"rebalance_timeout_ms": -1, "subscribed_topic_names": ("orders",)},
        {"rebalance_timeout_ms": 30_000},  # neither names nor a regex
        {"rebalance_timeout_ms": 30_000, "subscribed_topic_names": ("orders",),
         "topic_partitions": None},
    ):
        kw = {"topic_partitions": owned, **fields}
        r = h.send(member_id="a", member_epoch=a.epoch, **kw)
        assert r.error.name == "none" and r.assignment is None, fields

"""A KIP-848 group unloaded from this coordinator (its state partition moved to another fleet
member) and loaded again, pinned where `make mutation` found it loose: unloading forgets every
piece of the group's soft state (its pending assignment timer, the assignment pace, its topic
hashes, its rebalance under way), so a reload starts from the log alone, as Kafka's onLoaded
does; and a static member replaced before its first target assignment (a paced group)."""

from __future__ import annotations

from coordinator.core.consumer import ConsumerGroupConfig
from coordinator.core.consumer.messages import GroupEpochBumped, RebalanceSettled
from coordinator.core.consumer.model import ConsumerGroupState
from tests.core.test_consumer_support import Harness

INTERVAL_MS = 1_000


def paced() -> Harness:
    return Harness(config=ConsumerGroupConfig(assignment_interval_ms=INTERVAL_MS))


def reload(h: Harness) -> None:
    """The group's records loaded again into the same core (the partition came back)."""
    for record in h.records:
        h.core.replay(record)
    h.core.finish_loading(h.clock.now)


def test_unloading_drops_the_pending_assignment_timer_and_the_topic_hashes() -> None:
    h = paced()
    h.poll(h.client("a"))  # a quiet group: assigned at once
    h.poll(h.client("b"))  # inside the interval: its run waits for a timer
    assert h.group.group_epoch > h.group.assignment_epoch
    assert h.core.next_deadline_ms() is not None
    assert h.core._hashes.readers("orders") == {"g"} and "orders" in h.core._hashes
    h.core.unload_group("g")
    # Nothing wakes this coordinator for a group it no longer owns, and no topic hash is kept
    # for it (a topic nobody here reads loses its cached hash).
    assert h.core.next_deadline_ms() is None
    assert not h.core._hashes.readers("orders") and "orders" not in h.core._hashes
    h.advance(10 * INTERVAL_MS)
    assert "g" not in h.core.groups


def test_a_reloaded_group_is_assigned_at_once_whatever_its_pace_was() -> None:
    """The last run's time is soft state: a loaded group is assigned at its first heartbeat, even
    inside the interval the previous owner's run started."""
    h = paced()
    h.poll(h.client("a"))
    h.poll(h.client("b"))
    assert h.group.group_epoch == 3 and h.group.assignment_epoch == 2
    h.core.unload_group("g")
    reload(h)  # same time: still inside the interval of the run at epoch 2
    assert h.group.state is ConsumerGroupState.ASSIGNING
    h.poll(h.clients["b"])
    assert h.group.assignment_epoch == h.group.group_epoch == 3


def test_a_rebalance_caught_by_an_unload_reads_as_started_at_the_reload() -> None:
    h = Harness()
    h.client("a")
    h.settle()
    h.poll(h.client("b"))  # a bump: a rebalance under way (a must revoke for b)
    assert h.group.state is not ConsumerGroupState.STABLE
    h.core.unload_group("g")
    h.clock.now += 60_000
    loaded_at = h.clock.now
    reload(h)
    epoch, metadata_hash = h.group.group_epoch, h.group.metadata_hash
    h.events.clear()
    h.settle()
    settled = [e for e in h.events if isinstance(e, RebalanceSettled)]
    assert len(settled) == 1
    assert settled[0].started_ms == loaded_at
    # What started it is not in the log: it reads as a metadata change of the group's topics.
    assert settled[0].bump == GroupEpochBumped("g", epoch, metadata_hash, topics=("orders",))


def test_a_group_unloaded_before_any_heartbeat_since_its_load() -> None:
    h = Harness()
    h.client("a", topics=("orders", "payments"))
    h.settle()
    other = Harness()  # the fleet member the partition moved to, and from again at once
    for record in h.records:
        other.core.replay(record)
    other.core.finish_loading(other.clock.now)
    other.core.unload_group("g")
    assert other.core.groups == {} and other.core.next_deadline_ms() is None
    other.records = list(h.records)
    reload(other)
    other.clients = h.clients
    other.settle()
    assert other.group.state is ConsumerGroupState.STABLE


def test_a_static_member_replaced_before_its_first_target_takes_an_empty_one() -> None:
    """Kafka's replaceMember copies the old id's target, the empty assignment when the group's
    (paced) run has not given it one yet."""
    h = paced()
    h.poll(h.client("a"))
    h.poll(h.client("s1", instance_id="static"))
    assert "s1" not in h.group.target_assignment  # its run waits for the interval's end
    h.leave(h.clients["s1"], static=True)
    response = h.poll(h.client("s2", instance_id="static"))
    assert response.error.name == "none"
    assert "s1" not in h.group.members and h.group.static_members == {"static": "s2"}
    assert h.group.target_assignment["s2"] == {}
    h.check_invariants()
    h.advance(INTERVAL_MS)
    h.settle()
    assert h.group.state is ConsumerGroupState.STABLE
    assert h.group.target_assignment["s2"]  # the run at the interval's end gave it partitions


def test_an_unloaded_group_joined_again_without_a_reload_starts_over() -> None:
    """Its partition came back with nothing of the group on it (deleted by the other owner):
    the same id is a new group, its regex resolved a heartbeat later as any new regex is."""
    h = Harness()
    h.poll(h.client("b", topics=None, regex="pay.*"))  # a new regex: resolved next heartbeat
    h.core.unload_group("g")
    fresh = Harness()
    fresh.clock.now = h.clock.now
    written = len(h.records)
    again = h.poll(h.client("c", topics=None, regex="pay.*"))
    first = fresh.poll(fresh.client("c", topics=None, regex="pay.*"))
    assert again == first and again.assignment == ()
    assert h.records[written:] == fresh.records


def grow(h: Harness, name: str, partitions: int) -> None:
    info = h.catalog.get(name)
    assert info is not None
    h.catalog.put(info.with_partitions(partitions))


def test_a_topic_change_the_other_owner_handled_is_not_blamed_after_the_reload() -> None:
    h = Harness()
    h.client("a", topics=("orders", "payments"))
    h.settle()
    grow(h, "payments", 5)
    h.core.topic_changed("payments")  # flagged here, but no heartbeat before the unload
    h.core.unload_group("g")
    other = Harness()  # the new owner rebalances for the change
    grow(other, "payments", 5)
    other.records = list(h.records)
    reload(other)
    other.clients = h.clients
    other.settle()
    written = len(other.records)
    assert written > len(h.records)
    h.records = other.records  # the partition comes back with everything the other wrote
    reload(h)
    h.settle()
    grow(h, "orders", 8)
    h.core.topic_changed("orders")
    h.events.clear()
    h.settle()
    bumps = [e for e in h.events if isinstance(e, GroupEpochBumped)]
    assert [(e.cause, e.topics) for e in bumps] == [("metadata_changed", ("orders",))]

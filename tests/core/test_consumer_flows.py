"""KIP-848 reconciliation flows through the pure ConsumerGroupCoordinator, with a fake clock."""

from __future__ import annotations

import pytest

from coordinator.core.consumer import ConsumerGroupConfig, HeartbeatResponse, MemberState
from coordinator.core.consumer.model import ConsumerGroupState
from coordinator.core.consumer.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from coordinator.core.topics import TopicInfo
from tests.core.test_consumer_support import Client, Harness, snapshot


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_n_members_join_and_every_partition_is_owned_once(n: int) -> None:
    h = Harness()
    for i in range(n):
        h.client(f"m{i}", topics=("orders", "payments"))
    h.settle()
    h.check_invariants()
    assert h.group.state is ConsumerGroupState.STABLE
    owned = [c.owned_set() for c in h.clients.values()]
    assert set().union(*owned) == h.partitions_of("orders", "payments")
    assert sum(len(o) for o in owned) == 9
    assert max(map(len, owned)) - min(map(len, owned)) <= 1  # uniform: balanced
    epochs = {c.epoch for c in h.clients.values()}
    assert epochs == {h.group.group_epoch} == {h.group.assignment_epoch}
    assert h.replayed().keys() == {"g"}
    assert snapshot(h.replayed()["g"]) == snapshot(h.group)


def test_first_join_creates_the_group_and_answers_the_assignment() -> None:
    h = Harness()
    c = h.client("a")
    r = h.poll(c)
    assert r.error.name == "none"
    # a new group is at epoch 1 (Kafka 4.4), so its first member reaches epoch 2
    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms) == ("a", 2, 5_000)
    assert r.assignment is not None and sum(len(tp.partitions) for tp in r.assignment) == 6
    types = [type(rec.key).__name__ for rec in h.records]
    assert types == [
        "ConsumerGroupMemberMetadataKey",
        "ConsumerGroupMetadataKey",
        "ConsumerGroupTargetAssignmentMemberKey",
        "ConsumerGroupTargetAssignmentMetadataKey",
        "ConsumerGroupCurrentMemberAssignmentKey",
    ]
    assert h.group.state is ConsumerGroupState.STABLE


def test_a_stable_group_writes_nothing_and_never_reassigns() -> None:
    h = Harness()
    for i in range(3):
        h.client(f"m{i}")
    h.settle()
    before = len(h.records)
    for _ in range(5):
        h.round()
    assert len(h.records) == before
    assert not any(r.assignment for c in h.clients.values() if (r := c.last) is not None)


def test_partitions_move_only_after_the_previous_owner_revokes_them() -> None:
    h = Harness(topics=(("orders", 4),))
    a = h.client("a")
    h.poll(a)
    assert len(a.owned_set()) == 4
    b = h.client("b")
    rb = h.poll(b)  # b joins: the target gives it 2 partitions, but a still holds them
    assert rb.member_epoch == h.group.group_epoch == 3
    assert b.owned_set() == set()
    assert h.group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    ra = h.poll(a)  # a learns it must revoke two partitions, still at epoch 2
    assert ra.member_epoch == 2
    assert h.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert len(a.owned_set()) == 2
    h.poll(b)  # a has not acknowledged the revocation yet: b still waits
    assert b.owned_set() == set()
    h.check_invariants()
    h.poll(a)  # a reports it no longer owns them: epoch 3, stable
    assert a.epoch == 3 and h.core.describe("g") is not None
    assert h.group.members["a"].is_reconciled_to(3)
    h.poll(b)
    assert len(b.owned_set()) == 2 and b.owned_set().isdisjoint(a.owned_set())
    h.check_invariants()
    assert h.group.state is ConsumerGroupState.STABLE


def test_a_heartbeat_that_omits_its_owned_partitions_has_not_revoked_them() -> None:
    """KIP-848 (Kafka's CurrentAssignmentBuilder.ownsRevokedPartitions): topic_partitions = null
    says "unchanged", not "none": a member asked to revoke stays UNREVOKED_PARTITIONS at its
    epoch, and the partitions stay with it, however many such heartbeats come and however much
    time passes short of its rebalance timeout; only an owned list without them completes the
    revocation (issue 36)."""
    h = Harness(topics=(("orders", 4),))
    a = h.client("a")
    h.poll(a)
    b = h.client("b")
    h.poll(b)
    h.poll(a)  # asked to revoke two partitions, still at its epoch
    first_epoch = a.epoch
    pending = h.group.members["a"].partitions_pending_revocation
    assert sum(map(len, pending.values())) == 2
    for _ in range(5):
        h.advance(1_000)
        r = h.send(member_id="a", member_epoch=first_epoch, topic_partitions=None)
        assert (r.error.name, r.member_epoch) == ("none", first_epoch)
        member = h.group.members["a"]
        assert member.state is MemberState.UNREVOKED_PARTITIONS
        assert member.partitions_pending_revocation == pending
        h.poll(b)
        assert b.owned_set() == set()  # still a's: never handed out twice
        h.check_invariants()
    h.poll(a)  # its owned list, without the revoked two: done
    assert a.epoch == first_epoch + 1 and h.group.members["a"].is_reconciled_to(a.epoch)
    h.poll(b)
    assert len(b.owned_set()) == 2 and b.owned_set().isdisjoint(a.owned_set())
    h.check_invariants()


def _handed_over(h: Harness) -> tuple[Client, HeartbeatResponse]:
    """b joins a group of one, waits for a to revoke, and heartbeats the way librdkafka does in
    its steady state (epoch only): the answer hands it two partitions."""
    a = h.client("a")
    h.poll(a)
    b = h.client("b")
    h.poll(b)
    h.poll(a)  # asked to revoke two
    h.poll(a)  # revoked: they are free
    r = h.send(member_id="b", member_epoch=b.epoch, topic_partitions=None)
    assert r.assignment is not None and sum(len(tp.partitions) for tp in r.assignment) == 2
    return b, r


@pytest.mark.parametrize("owned", ["omitted", "acked_less"])
def test_an_answer_that_handed_partitions_is_repeated_until_the_member_reports_them(
    owned: str,
) -> None:
    """Issue 38 (an intended difference from Kafka: member_update.AssignmentAcks). librdkafka
    times a ConsumerGroupHeartbeat out after one heartbeat interval, drops the late answer and
    retries with no full request: the answer that handed it partitions is lost. Kafka's rule
    (assignment only on a join, a full request or a change) never repeats it, and the member
    kept fewer partitions than the group counted it reconciled to, the group Stable with
    partitions nobody consumed (100 members through a loaded fleet). Its next heartbeats,
    whether they omit the owned partitions or acknowledge an older assignment, get it again;
    once it reports owning them, the answers go back to carrying nothing."""
    h = Harness(topics=(("orders", 4),))
    b, lost = _handed_over(h)
    assert h.group.state is ConsumerGroupState.STABLE  # the coordinator counts b reconciled
    for _ in range(3):
        h.advance(500)
        r = h.send(member_id="b", member_epoch=b.epoch,
                   topic_partitions=None if owned == "omitted" else ())
        assert r.error.name == "none" and r.assignment == lost.assignment
    h.poll(b)  # takes them, reports them with its next heartbeat
    assert len(b.owned_set()) == 2
    h.poll(b)
    r = h.send(member_id="b", member_epoch=b.epoch, topic_partitions=None)
    assert r.assignment is None
    h.check_invariants()


def test_a_full_request_after_a_lost_answer_ends_the_repeats_once_reported() -> None:
    """The Java consumer's way after an error: a full request gets the assignment (Kafka's
    rule); its owned partitions then end the repeats as an acknowledgement does."""
    h = Harness(topics=(("orders", 4),))
    b, lost = _handed_over(h)
    r = h.poll(b, full=True)
    assert r.assignment == lost.assignment and len(b.owned_set()) == 2
    h.poll(b)
    assert h.send(member_id="b", member_epoch=b.epoch, topic_partitions=None).assignment is None


def test_a_leaving_member_frees_its_partitions_at_once() -> None:
    h = Harness()
    a, b = h.client("a"), h.client("b")
    h.settle()
    epoch = h.group.group_epoch
    r = h.leave(a)
    assert (r.error.name, r.member_id, r.member_epoch) == ("none", "a", -1)
    assert "a" not in h.group.members and h.group.group_epoch == epoch + 1
    assert h.group.state is ConsumerGroupState.ASSIGNING
    h.settle()
    assert b.owned_set() == h.partitions_of("orders")
    h.check_invariants()


def test_a_member_that_stops_heartbeating_is_fenced_after_the_session_timeout() -> None:
    h = Harness()
    a, b = h.client("a"), h.client("b")
    h.settle()
    del h.clients["a"]  # kill -9: a never heartbeats again (its last was 1 s ago)
    for _ in range(43):
        h.round()
    assert "a" in h.group.members
    h.round(2_000)
    assert "a" not in h.group.members
    h.settle()
    assert b.owned_set() == h.partitions_of("orders")
    h.check_invariants()
    assert a.owned_set()  # the dead client's view is irrelevant: it is gone


def test_a_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout() -> None:
    h = Harness(topics=(("orders", 4),))
    a = h.client("a", rebalance_timeout_ms=10_000)
    h.poll(a)
    b = h.client("b")
    h.poll(b)
    everything = a.owned_tps()
    ra = h.poll(a)
    assert h.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert ra.member_epoch == 2
    # a keeps heartbeating but keeps reporting the partitions it was asked to revoke
    for _ in range(9):
        assert h.send(member_id="a", member_epoch=2, topic_partitions=everything).error.name == (
            "none"
        )
        h.advance(1_000)
        h.poll(b)
        assert len(b.owned_set()) == 0  # what b is due stays with a until released
        h.check_invariants()
    assert "a" in h.group.members
    h.advance(1_000)
    assert "a" not in h.group.members
    r = h.send(member_id="a", member_epoch=1, topic_partitions=())
    assert r.error.name == "unknown_member_id"
    h.clients.pop("a")
    h.settle()
    assert b.owned_set() == h.partitions_of("orders")


def test_partitions_added_to_a_subscribed_topic_are_assigned_after_a_hash_change() -> None:
    h = Harness()
    a, b = h.client("a"), h.client("b")
    h.settle()
    epoch, old_hash = h.group.group_epoch, h.group.metadata_hash
    info = h.catalog.get("orders")
    assert info is not None
    h.catalog.put(info.with_partitions(10))
    h.core.topic_changed("orders")
    h.settle()
    assert h.group.group_epoch == epoch + 1 and h.group.metadata_hash != old_hash
    assert a.owned_set() | b.owned_set() == h.partitions_of("orders")
    assert len(a.owned_set()) == len(b.owned_set()) == 5
    h.check_invariants()


def test_an_unsubscribed_topic_change_triggers_nothing() -> None:
    h = Harness()
    h.client("a")
    h.settle()
    before = len(h.records)
    info = h.catalog.get("audit")
    assert info is not None
    h.catalog.put(info.with_partitions(4))
    h.core.topic_changed("audit")
    h.round()
    assert len(h.records) == before


def test_a_topic_created_under_a_subscribed_name_is_assigned() -> None:
    h = Harness()
    a = h.client("a", topics=("orders", "later"))
    h.settle()
    assert a.owned_set() == h.partitions_of("orders")
    import uuid

    h.catalog.put(TopicInfo("later", uuid.UUID(int=99), 2))
    h.core.topic_changed("later")
    h.settle()
    assert a.owned_set() == h.partitions_of("orders", "later")


def test_static_member_leaves_and_its_replacement_keeps_the_assignment() -> None:
    h = Harness()
    a = h.client("a1", instance_id="i-a")
    b = h.client("b", instance_id="i-b")
    h.settle()
    kept = a.owned_set()
    epoch = h.group.group_epoch
    r = h.leave(a, static=True)
    assert (r.member_id, r.member_epoch) == ("a1", -2)
    assert h.group.members["a1"].member_epoch == -2
    assert h.group.group_epoch == epoch  # no rebalance while it is away
    for _ in range(3):
        h.round()
    assert b.owned_set().isdisjoint(kept)  # its partitions wait for it
    a2 = h.client("a2", instance_id="i-a")
    r2 = h.poll(a2)
    assert r2.error.name == "none" and "a1" not in h.group.members
    assert a2.owned_set() == kept
    assert h.group.group_epoch == epoch
    h.check_invariants()
    h.settle()
    assert h.group.state is ConsumerGroupState.STABLE


def test_static_member_away_longer_than_its_session_is_removed() -> None:
    h = Harness()
    a = h.client("a1", instance_id="i-a")
    b = h.client("b")
    h.settle()
    h.leave(a, static=True)  # the session timeout keeps running from its last heartbeat
    for _ in range(43):
        h.round()
    assert h.group.members["a1"].member_epoch == -2
    h.round(2_000)
    assert "a1" not in h.group.members
    h.settle()
    assert b.owned_set() == h.partitions_of("orders")


def test_static_instance_ids_are_fenced_and_unreleased() -> None:
    h = Harness()
    a = h.client("a1", instance_id="i-a")
    h.settle()
    intruder = h.client("x", instance_id="i-a")
    r = h.poll(intruder)
    assert r.error.name == "unreleased_instance_id"
    h.clients.pop("x")
    r = h.send(member_id="x", member_epoch=a.epoch, instance_id="i-a", topic_partitions=())
    assert r.error.name == "fenced_instance_id"
    r = h.send(member_id="a1", member_epoch=-2, instance_id="i-unknown")
    assert r.error.name == "unknown_member_id"
    r = h.send(member_id="x", member_epoch=-2, instance_id="i-a")
    assert r.error.name == "fenced_instance_id"


def test_stale_and_future_epochs_are_fenced() -> None:
    h = Harness()
    a = h.client("a")
    h.poll(a)
    b = h.client("b")
    h.settle()
    h.client("c")
    h.settle()
    epoch = a.epoch
    assert epoch == 4
    assert h.send(member_id="a", member_epoch=epoch + 1, topic_partitions=()).error.name == (
        "fenced_member_epoch"
    )
    assert h.send(member_id="a", member_epoch=epoch - 2, topic_partitions=()).error.name == (
        "fenced_member_epoch"
    )
    # the previous epoch with a subset of the assignment: the bump's response was lost
    previous = h.group.members["a"].previous_member_epoch
    r = h.send(member_id="a", member_epoch=previous, topic_partitions=a.owned_tps())
    assert r.error.name == "none" and r.member_epoch == epoch
    # the previous epoch while claiming partitions it does not have: fenced
    r = h.send(member_id="a", member_epoch=previous, topic_partitions=b.owned_tps())
    assert r.error.name == "fenced_member_epoch"
    # a fenced member rejoins with epoch 0 under its id (KAFKA-19233) and gets its assignment
    a.owned, a.epoch = {}, 0
    r = h.send(
        member_id="a",
        member_epoch=0,
        rebalance_timeout_ms=30_000,
        subscribed_topic_names=("orders",),
        topic_partitions=(),
    )
    assert r.error.name == "none" and r.member_epoch == epoch and r.assignment is not None
    h.check_invariants()


def test_request_checks() -> None:
    h = Harness(config=ConsumerGroupConfig(max_size=1))
    base: dict[str, object] = {
        "member_id": "a",
        "member_epoch": 0,
        "rebalance_timeout_ms": 1,
        "subscribed_topic_names": ("orders",),
        "topic_partitions": (),
    }
    cases: list[tuple[dict[str, object], str]] = [
        ({"member_id": ""}, "invalid_request"),
        ({"group_id": ""}, "invalid_request"),
        ({"instance_id": ""}, "invalid_request"),
        ({"rack_id": ""}, "invalid_request"),
        ({"rebalance_timeout_ms": -1}, "invalid_request"),
        ({"topic_partitions": None}, "invalid_request"),
        ({"subscribed_topic_names": None}, "invalid_request"),
        ({"member_epoch": -3}, "invalid_request"),
        ({"member_epoch": -2}, "invalid_request"),
        ({"server_assignor": "sticky"}, "unsupported_assignor"),
        ({"member_epoch": 3}, "group_id_not_found"),
        ({"member_epoch": -1}, "group_id_not_found"),
        ({"subscribed_topic_regex": "(?=x)"}, "invalid_regular_expression"),
    ]
    for change, error in cases:
        assert h.send(**(base | change)).error.name == error, change
    assert not h.records
    assert h.send(**(base | {"member_id": "", "api_version": 0})).member_id == "generated-1"
    assert h.send(**(base | {"member_id": "b"})).error.name == "group_max_size_reached"
    # the size check comes first (Kafka's throwIfConsumerGroupIsFull), then the member
    assert h.send(member_id="zz", member_epoch=1, topic_partitions=()).error.name == (
        "group_max_size_reached"
    )
    h2 = Harness()
    h2.poll(h2.client("a"))
    assert h2.send(member_id="zz", member_epoch=1, topic_partitions=()).error.name == (
        "unknown_member_id"
    )


def test_group_states_and_deletion() -> None:
    h = Harness()
    assert h.core.state_of("g") is ConsumerGroupState.DEAD
    a = h.client("a")
    h.poll(a)
    assert h.core.state_of("g") is ConsumerGroupState.STABLE
    assert h.core.delete_group("g")[0].name == "non_empty_group"
    h.leave(a)
    assert h.group.state is ConsumerGroupState.EMPTY
    error, records = h.core.delete_group("g")
    assert error.name == "none"
    assert [type(r.key) for r in records][-2:] == [
        ConsumerGroupTargetAssignmentMetadataKey,
        ConsumerGroupMetadataKey,
    ]
    h.records.extend(records)
    assert h.core.state_of("g") is ConsumerGroupState.DEAD
    assert h.replayed() == {}


def test_describe_reports_epochs_assignments_and_targets() -> None:
    h = Harness()
    h.client("a", assignor="range")
    h.client("b")
    h.settle()
    d = h.core.describe("g")
    assert d is not None
    assert d.state is ConsumerGroupState.STABLE and d.assignor_name == "range"
    assert d.group_epoch == d.assignment_epoch
    assert [m.member_id for m in d.members] == ["a", "b"]
    for m in d.members:
        assert m.assignment == m.target_assignment
    assert h.core.describe("nope") is None
    assert h.core.list_groups() == [("g", ConsumerGroupState.STABLE)]


def test_range_assignor_chosen_by_members() -> None:
    h = Harness(topics=(("orders", 6), ("payments", 6)))
    a = h.client("a", topics=("orders", "payments"), assignor="range")
    b = h.client("b", topics=("orders", "payments"), assignor="range")
    h.settle()
    # co-partitioned: the same partition numbers of both topics
    by_topic_a = {p for _, p in a.owned_set()}
    assert by_topic_a == {0, 1, 2}
    assert {p for _, p in b.owned_set()} == {3, 4, 5}


def test_loading_restores_the_group_and_its_timers() -> None:
    h = Harness()
    a, b = h.client("a"), h.client("b")
    h.settle()
    fresh = Harness()
    for record in h.records:
        fresh.core.replay(record)
    fresh.core.finish_loading(fresh.clock.now)
    assert snapshot(fresh.group) == snapshot(h.group)
    # the same clients carry on against the restored coordinator without a rebalance
    fresh.clients = {"a": a, "b": b}
    fresh.round()
    assert not fresh.records
    fresh.clients.pop("b")
    fresh.advance(46_000)
    assert "b" not in fresh.group.members


def test_the_last_member_leaving_brings_the_assignment_epoch_up_to_the_group_epoch() -> None:
    """KAFKA-20442 (Kafka 4.4): fencing the last member bumps the group epoch and writes the
    target assignment metadata at that epoch, so an Empty group's epochs match (Kafka's
    kafka-consumer-groups.sh --describe --state --verbose shows both)."""
    h = Harness()
    a, b = h.client("a"), h.client("b")
    h.settle()
    h.leave(a)
    h.settle()
    h.leave(b)
    assert h.group.state is ConsumerGroupState.EMPTY
    assert h.group.assignment_epoch == h.group.group_epoch
    assert type(h.records[-1].key) is ConsumerGroupTargetAssignmentMetadataKey
    assert snapshot(h.replayed()["g"]) == snapshot(h.group)

"""Which member a ConsumerGroupHeartbeat is for, and whether a full group takes it (Kafka's
GroupMetadataManager: throwIfConsumerGroupIsFull, getOrMaybeSubscribe{Dynamic,Static}
ConsumerGroupMember), pinned where `make mutation` found them loose: the refusals with Kafka's
error and words; a full group admits heartbeats of its members and a static member's restart
(KAFKA-20601) but no new member, static or not; a known member rejoining with epoch 0 and an
instance id keeps its state; a static member's new id starts at epoch 0, previous epoch 0."""

from __future__ import annotations

from coordinator.core.consumer import ConsumerGroupConfig
from coordinator.core.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
)
from tests.core.test_consumer_support import Harness

FULL = "The consumer group has reached its maximum capacity of 2 members."


def refusal(response: object) -> tuple[str, str | None]:
    return (response.error.name, response.error_message)  # type: ignore[attr-defined]


def test_a_full_group_takes_its_members_and_static_restarts_but_no_new_member() -> None:
    h = Harness(config=ConsumerGroupConfig(max_size=2))
    a = h.client("a")
    s = h.client("s", instance_id="i-s")
    h.settle()
    assert refusal(h.poll(h.client("new"))) == ("group_max_size_reached", FULL)
    assert refusal(h.poll(h.client("new-static", instance_id="i-new"))) == (
        "group_max_size_reached", FULL)  # fmt: skip
    del h.clients["new"], h.clients["new-static"]
    assert h.poll(a).error.name == "none"  # a member's heartbeat in a full group
    h.leave(s, static=True)  # -2: it may come back
    restarted = h.poll(h.client("s2", instance_id="i-s"))  # the same instance, a new member id
    assert restarted.error.name == "none"
    assert set(h.group.members) == {"a", "s2"}


def test_membership_refusals_say_what_kafka_says() -> None:
    h = Harness()
    h.client("a")
    h.client("s", instance_id="i-s")
    h.settle()
    epoch = h.group.members["s"].member_epoch
    assert refusal(h.send(member_id="ghost", member_epoch=3, topic_partitions=())) == (
        "unknown_member_id", "Member ghost is not a member of group g.")  # fmt: skip
    assert refusal(h.send(member_id="x", member_epoch=epoch, instance_id="i-none",
                          topic_partitions=())) == (
        "unknown_member_id", "Instance id i-none is unknown.")  # fmt: skip
    assert refusal(h.send(member_id="x", member_epoch=epoch, instance_id="i-s",
                          topic_partitions=())) == (
        "fenced_instance_id",
        "Static member x with instance id i-s was fenced by member s.")  # fmt: skip
    joined = h.send(member_id="y", member_epoch=0, instance_id="i-s", rebalance_timeout_ms=5_000,
                    subscribed_topic_names=("orders",), topic_partitions=())  # fmt: skip
    assert refusal(joined) == (
        "unreleased_instance_id",
        "Static member y with instance id i-s cannot join the group because the instance id "
        "is owned by s member.")  # fmt: skip


def test_a_known_member_rejoining_with_an_instance_id_keeps_its_state() -> None:
    h = Harness()
    h.client("a")
    h.client("b")
    h.settle()
    before = h.group.members["a"]
    response = h.send(member_id="a", member_epoch=0, instance_id="i-a",
                      rebalance_timeout_ms=30_000, subscribed_topic_names=("orders",),
                      topic_partitions=())  # fmt: skip
    assert response.error.name == "none"
    after = h.group.members["a"]
    assert after.instance_id == "i-a" and h.group.static_members == {"i-a": "a"}
    assert (after.member_epoch, after.previous_member_epoch, after.assigned_partitions) == (
        before.member_epoch, before.previous_member_epoch, before.assigned_partitions)  # fmt: skip


def test_a_static_members_new_id_is_written_at_epoch_zero_then_reconciled() -> None:
    h = Harness()
    h.client("a")
    s = h.client("s1", instance_id="i-s")
    h.settle()
    old = h.group.members["s1"]
    assert old.member_epoch > 0
    h.leave(s, static=True)
    written = len(h.records)
    h.poll(h.client("s2", instance_id="i-s"))
    current = [r.value for r in h.records[written:]
               if r.key == ConsumerGroupCurrentMemberAssignmentKey("g", "s2")]  # fmt: skip
    assert isinstance(current[0], ConsumerGroupCurrentMemberAssignmentValue)
    assert (current[0].member_epoch, current[0].previous_member_epoch) == (0, 0)
    new = h.group.members["s2"]
    assert (new.member_epoch, new.previous_member_epoch) == (h.group.assignment_epoch, 0)
    assert new.assigned_partitions == old.assigned_partitions

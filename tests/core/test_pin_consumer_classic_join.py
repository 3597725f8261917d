"""A classic member's JoinGroup to a KIP-848 consumer group (Kafka's
classicGroupJoinToConsumerGroup), pinned where `make mutation` found it loose: the group's size
limit (a full group refuses a new member, dynamic or static, but admits a known member's rejoin
and a static member's restart, KAFKA-20601), the protocol check, and a static member's restart
under a new member id (Kafka's replaceMember: the new id starts at epoch 0, previous epoch 0)."""

from __future__ import annotations

from coordinator.core.consumer import ConsumerGroupConfig
from coordinator.core.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupMemberMetadataKey,
)
from coordinator.core.messages import ErrorCode
from tests.core.test_consumer_support import Harness
from tests.core.test_pin_consumer_classic_member import classic_join

FULL = ErrorCode.group_max_size_reached


def full_group() -> Harness:
    """n1 (consumer protocol) and a static classic member: a group of its maximum size, 2."""
    h = Harness(config=ConsumerGroupConfig(max_size=2))
    h.client("n1")
    h.settle()
    classic_join(h, instance_id="static")
    assert len(h.group.members) == 2
    return h


def test_a_full_group_refuses_a_new_classic_member_dynamic_or_static() -> None:
    h = full_group()
    before = len(h.records)
    assert classic_join(h, error=FULL).member_id == ""
    classic_join(h, instance_id="other", error=FULL)
    assert len(h.records) == before and len(h.group.members) == 2


def test_a_full_group_admits_its_members_rejoin_and_a_static_members_restart() -> None:
    h = full_group()
    old = h.group.static_members["static"]
    again = classic_join(h, old, instance_id="static")
    assert again.member_id == old
    restarted = classic_join(h, instance_id="static")  # a new member id, the same instance
    assert restarted.member_id != old
    assert set(h.group.members) == {"n1", restarted.member_id}


def test_a_group_of_one_below_its_maximum_admits_a_new_classic_member() -> None:
    h = Harness(config=ConsumerGroupConfig(max_size=3))
    h.client("n1")
    h.settle()
    classic_join(h)
    classic_join(h)
    classic_join(h, error=FULL)


def test_a_classic_member_without_a_protocol_the_others_list_is_refused() -> None:
    h = Harness()
    h.client("n1")
    h.settle()
    classic_join(h)  # the first classic member lists "range": every later one must too
    before = len(h.records)
    classic_join(h, protocol="roundrobin", error=ErrorCode.inconsistent_group_protocol)
    assert len(h.records) == before


def test_a_static_classic_member_restarted_starts_its_new_id_at_epoch_zero() -> None:
    h = Harness()
    n1 = h.client("n1")
    h.settle()
    first = classic_join(h, instance_id="static")
    h.poll(n1)
    h.poll(n1)  # n1 revoked what the classic member is to get
    first = classic_join(h, first.member_id, instance_id="static")
    old = h.group.members[first.member_id]
    assert old.assigned_partitions
    assert old.member_epoch > 0 and old.previous_member_epoch > 0
    written = len(h.records)
    restarted = classic_join(h, instance_id="static")
    new_id = restarted.member_id
    records = h.records[written:]
    # Kafka's replaceMember: the old id's tombstones, then the new id's subscription, target and
    # current assignment at epoch 0 (previous 0), before it is reconciled.
    subscription_at = next(i for i, r in enumerate(records)
                           if r.key == ConsumerGroupMemberMetadataKey("g", new_id))  # fmt: skip
    current = [r.value for r in records[subscription_at:]
               if r.key == ConsumerGroupCurrentMemberAssignmentKey("g", new_id)]  # fmt: skip
    assert isinstance(current[0], ConsumerGroupCurrentMemberAssignmentValue)
    assert (current[0].member_epoch, current[0].previous_member_epoch) == (0, 0)
    new = h.group.members[new_id]
    assert new.previous_member_epoch == 0
    assert new.member_epoch == restarted.generation_id == h.group.assignment_epoch
    assert new.assigned_partitions == old.assigned_partitions

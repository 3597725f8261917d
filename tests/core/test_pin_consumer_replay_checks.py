"""Replay's checks of the record order (coordinator.core.consumer.replay, model: Kafka's
IllegalStateException in ConsumerGroup and GroupMetadataManager.replay), pinned where `make
mutation` found them loose: each tombstone that comes before the records it must follow is
refused saying which, a partition is never given at an epoch at or below the one it is still
held at, and a member's partition epochs are all released when it moves on, even after another
member released one of its topics; a current assignment read before its member record (as a
compacted log can order them) makes the member."""

from __future__ import annotations

import re

import pytest

from coordinator.core.consumer import ConsumerGroupRecord, TopicPartitions, replay
from coordinator.core.consumer.model import ConsumerGroup, IllegalConsumerState
from coordinator.core.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMemberMetadataValue,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
    ConsumerGroupValue,
)
from tests.core.test_consumer_support import topic_id

A, B = topic_id(0), topic_id(1)
GROUP = ConsumerGroupMetadataKey("g")
TARGET = ConsumerGroupTargetAssignmentMetadataKey("g")


def member(m: str) -> ConsumerGroupRecord:
    value = ConsumerGroupMemberMetadataValue(None, None, "c", "/h", ("orders",), None, 300, None)
    return ConsumerGroupRecord(ConsumerGroupMemberMetadataKey("g", m), value)


def current(m: str, epoch: int, *held: TopicPartitions) -> ConsumerGroupRecord:
    value = ConsumerGroupCurrentMemberAssignmentValue(epoch, epoch - 1, 0, held, ())
    return ConsumerGroupRecord(ConsumerGroupCurrentMemberAssignmentKey("g", m), value)


def target(m: str) -> ConsumerGroupRecord:
    value = ConsumerGroupTargetAssignmentMemberValue((TopicPartitions(A, (0,)),))
    return ConsumerGroupRecord(ConsumerGroupTargetAssignmentMemberKey("g", m), value)


def tombstone(key: ConsumerGroupKey) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(key, None)


def record(key: ConsumerGroupKey, value: ConsumerGroupValue) -> ConsumerGroupRecord:
    return ConsumerGroupRecord(key, value)


def refused(records: list[ConsumerGroupRecord], message: str) -> None:
    groups: dict[str, ConsumerGroup] = {}
    *before, last = records
    for r in before:
        replay(groups, r)
    with pytest.raises(IllegalConsumerState, match=f"^{re.escape(message)}$"):
        replay(groups, last)


def test_a_group_tombstone_with_members_left_is_refused() -> None:
    refused([record(GROUP, ConsumerGroupMetadataValue(1)), member("m"), tombstone(GROUP)],
            "tombstone for group 'g' with 1 members")  # fmt: skip


def test_a_group_tombstone_with_a_target_left_is_refused() -> None:
    refused([record(GROUP, ConsumerGroupMetadataValue(1)), target("m"), tombstone(GROUP)],
            "tombstone for group 'g' with a target")  # fmt: skip


def test_a_group_tombstone_before_its_target_metadata_tombstone_is_refused() -> None:
    refused([record(GROUP, ConsumerGroupMetadataValue(1)),
             record(TARGET, ConsumerGroupTargetAssignmentMetadataValue(1)), tombstone(GROUP)],
            "tombstone for group 'g' before its target assignment tombstone")  # fmt: skip


def test_a_target_metadata_tombstone_with_member_targets_left_is_refused() -> None:
    refused([record(TARGET, ConsumerGroupTargetAssignmentMetadataValue(1)), target("m"),
             tombstone(TARGET)],
            "target assignment tombstone for 'g' with member targets left")  # fmt: skip


def test_a_member_tombstone_before_its_assignment_tombstones_is_refused() -> None:
    refused([member("m"), current("m", 1), tombstone(ConsumerGroupMemberMetadataKey("g", "m"))],
            "member 'm' deleted before its current assignment tombstone")  # fmt: skip
    refused([member("m"), current("m", 1), target("m"),
             tombstone(ConsumerGroupCurrentMemberAssignmentKey("g", "m")),
             tombstone(ConsumerGroupMemberMetadataKey("g", "m"))],
            "member 'm' deleted before its target assignment tombstone")  # fmt: skip


def test_a_partition_is_not_given_at_the_epoch_it_is_still_held_at() -> None:
    refused([member("a"), current("a", 5, TopicPartitions(A, (0,))),
             member("b"), current("b", 5, TopicPartitions(A, (0,)))],
            f"group 'g': cannot set the epoch of {A}-0 to 5: still held at epoch 5")  # fmt: skip


def test_a_member_moving_on_releases_every_topic_it_held() -> None:
    groups: dict[str, ConsumerGroup] = {}
    for r in [member("a"), current("a", 3, TopicPartitions(A, (0,)), TopicPartitions(B, (0,))),
              member("b"), current("b", 4, TopicPartitions(A, (0,))),
              current("b", 5)]:  # b takes A-0 at 4, then releases it: A's entry is gone
        replay(groups, r)
    assert groups["g"].current_partition_epoch(A, 0) == -1
    assert groups["g"].current_partition_epoch(B, 0) == 3
    replay(groups, current("a", 6))  # a moves on with nothing: B-0 is released too
    assert groups["g"].current_partition_epoch(B, 0) == -1


def test_a_current_assignment_read_before_its_member_record_makes_the_member() -> None:
    """A compacted log keeps each key's last record only: a member whose subscription changed
    after its last assignment has record 8 before record 5."""
    groups: dict[str, ConsumerGroup] = {}
    replay(groups, current("m", 4, TopicPartitions(A, (0, 1))))
    replay(groups, member("m"))
    (m,) = groups["g"].members.values()
    assert (m.member_id, m.member_epoch, m.client_id) == ("m", 4, "c")
    assert m.assigned_partitions == {A: frozenset({0, 1})}

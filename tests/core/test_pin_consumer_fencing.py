"""What a fenced KIP-848 member is told, and the assignment pace at its smallest, pinned where
`make mutation` found them loose: FENCED_MEMBER_EPOCH's message says whether the member's epoch
is greater or smaller than the coordinator's, in Kafka's words
(throwIfConsumerGroupMemberEpochIsInvalid); and an assignment interval of 1 ms is still an
interval (a second run in the same millisecond waits for the next one)."""

from __future__ import annotations

from coordinator.core.consumer.target import AssignmentPacer
from tests.core.test_consumer_support import Harness


def fenced_message(received: int, known: int) -> str:
    size = "greater" if received > known else "smaller"
    return (f"The consumer group member has a {size} member epoch ({received}) than the one "
            f"known by the group coordinator ({known}). The member must abandon all its "
            "partitions and rejoin.")  # fmt: skip


def test_a_fenced_members_message_says_whether_its_epoch_is_greater_or_smaller() -> None:
    h = Harness()
    a = h.client("a")
    h.settle()
    h.poll(h.client("b"))
    h.settle()
    epoch = h.group.members["a"].member_epoch
    assert epoch >= 3 and h.group.members["a"].previous_member_epoch < epoch
    greater = h.send(member_id="a", member_epoch=epoch + 1, topic_partitions=a.owned_tps())
    assert greater.error.name == "fenced_member_epoch"
    assert greater.error_message == fenced_message(epoch + 1, epoch)
    smaller = h.send(member_id="a", member_epoch=1, topic_partitions=a.owned_tps())
    assert smaller.error.name == "fenced_member_epoch"
    assert smaller.error_message == fenced_message(1, epoch)


def test_an_assignment_interval_of_one_millisecond_is_still_an_interval() -> None:
    pacer = AssignmentPacer(1)
    assert pacer.due_at("g", 2, 100) is None  # never assigned: at once
    pacer.assigned("g", 100)
    assert pacer.due_at("g", 3, 100) == 101  # a second bump in the same millisecond waits
    assert pacer.due_at("g", 3, 101) is None

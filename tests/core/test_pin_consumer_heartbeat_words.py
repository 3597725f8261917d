"""A KIP-848 heartbeat's refusals (coordinator.core.consumer.coordinator), pinned where `make
mutation` found them loose: a member at a non-zero epoch of a group that does not exist gets
GROUP_ID_NOT_FOUND in Kafka's words, and a member whose state a record left unknown (a state
byte this coordinator does not know) is fenced in Kafka's words unless its heartbeat says it
owns nothing; taking up a regex the group resolved does not resolve it again, and a bump for a
changed subscription names that cause."""

from __future__ import annotations

import pytest

from coordinator.core.consumer import ConsumerGroupRecord
from coordinator.core.consumer.messages import GroupEpochBumped
from coordinator.core.consumer.model import MemberState
from coordinator.core.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupCurrentMemberAssignmentValue,
    ConsumerGroupRegularExpressionKey,
)
from coordinator.core.topics import TopicInfo
from tests.core.test_consumer_support import Harness, topic_id

UNKNOWN_STATE = (
    "The consumer group member is in a unknown state. The member must abandon all its "
    "partitions and rejoin."
)


def test_a_member_of_a_group_that_does_not_exist_is_told_so() -> None:
    h = Harness()
    response = h.send(member_id="a", member_epoch=5, topic_partitions=())
    assert (response.error.name, response.error_message) == (
        "group_id_not_found", "Consumer group g not found."
    )


def unknown_member() -> tuple[Harness, int]:
    h = Harness()
    c = h.client("a")
    h.settle()
    held = c.owned_tps()
    h.core.replay(ConsumerGroupRecord(
        ConsumerGroupCurrentMemberAssignmentKey("g", "a"),
        ConsumerGroupCurrentMemberAssignmentValue(c.epoch, c.epoch - 1, 9, held, ()),
    ))  # fmt: skip
    assert h.group.members["a"].state is MemberState.UNKNOWN
    return h, c.epoch


@pytest.mark.parametrize("owned", ["some", None])
def test_a_member_in_an_unknown_state_is_fenced_unless_it_owns_nothing(owned: str | None) -> None:
    h, epoch = unknown_member()
    held = h.clients["a"].owned_tps() if owned else None
    assert held != ()
    response = h.send(member_id="a", member_epoch=epoch, topic_partitions=held)
    assert (response.error.name, response.error_message) == ("fenced_member_epoch", UNKNOWN_STATE)


def test_a_member_in_an_unknown_state_owning_nothing_goes_on() -> None:
    h, epoch = unknown_member()
    response = h.send(member_id="a", member_epoch=epoch, topic_partitions=())
    assert response.error.name == "none"


def test_taking_up_a_regex_the_group_resolved_does_not_resolve_it_again() -> None:
    """Only a regex new to the group is resolved at once; one the group resolved waits for a
    topic change or the refresh interval (Kafka's maybeUpdateRegularExpressions)."""
    h = Harness()
    h.poll(h.client("a", topics=None, regex="pay.*"))
    b = h.client("b")
    h.settle()
    h.round()
    assert h.group.resolved_regexes["pay.*"].topics == frozenset({"payments"})
    h.catalog.put(TopicInfo("payouts", topic_id(9), 2))  # not announced (no topic_changed)
    written = len(h.records)
    response = h.send(member_id="b", member_epoch=b.epoch, subscribed_topic_names=(),
                      subscribed_topic_regex="pay.*", topic_partitions=b.owned_tps())  # fmt: skip
    assert response.error.name == "none"
    b.epoch, b.topics, b.regex = response.member_epoch, None, "pay.*"
    h.round()
    h.round()
    assert not [r for r in h.records[written:]
                if isinstance(r.key, ConsumerGroupRegularExpressionKey)]  # fmt: skip
    assert h.group.resolved_regexes["pay.*"].topics == frozenset({"payments"})


def test_a_bump_for_a_changed_subscription_says_so() -> None:
    h = Harness()
    a = h.client("a")
    h.settle()
    h.events.clear()
    response = h.send(member_id="a", member_epoch=a.epoch, subscribed_topic_names=("payments",),
                      topic_partitions=a.owned_tps())  # fmt: skip
    assert response.error.name == "none"
    (bumped,) = [e for e in h.events if isinstance(e, GroupEpochBumped)]
    assert (bumped.cause, bumped.member_id) == ("subscription_changed", "a")


@pytest.mark.parametrize(("timeout", "names"), [
    (30_000, None),  # a rebalance timeout but no subscription
    (-1, ("orders",)),  # a subscription but no rebalance timeout
])
def test_a_heartbeat_missing_a_field_of_a_full_request_gets_no_unchanged_assignment(
    timeout: int, names: tuple[str, ...] | None
) -> None:
    """Kafka's consumerGroupHeartbeat sends the assignment on a join, when it changed, or on a
    full request: rebalance timeout, subscription and owned partitions all present."""
    h = Harness()
    a = h.client("a")
    h.settle()
    kw = {"member_id": "a", "member_epoch": a.epoch, "topic_partitions": a.owned_tps()}
    assert h.send(**kw, rebalance_timeout_ms=30_000, subscribed_topic_names=("orders",)
                  ).assignment == a.owned_tps()  # fmt: skip
    response = h.send(**kw, rebalance_timeout_ms=timeout, subscribed_topic_names=names)
    assert (response.error.name, response.assignment) == ("none", None)

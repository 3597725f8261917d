"""The subscription type the assignor is given, and the range assignor's member order
(coordinator.core.consumer.model, .assignors), pinned where `make mutation` found them loose: a
group whose members all use one regex is homogeneous (Kafka's subscriptionType counts each
resolved topic once per member), names and two regexes are not; the range assignor takes
static members first, by instance id, even when a dynamic member id sorts before it; an
assignor given a topic it does not know names it."""

from __future__ import annotations

import uuid

import pytest

from coordinator.core.consumer import ConsumerGroupConfig
from coordinator.core.consumer.assignors import (
    AssignorError,
    GroupSpec,
    MemberSpec,
    RangeAssignor,
    UniformAssignor,
)
from coordinator.core.consumer.messages import TargetAssignmentComputed
from coordinator.core.consumer.model import EMPTY_PARTITIONS, SubscriptionType
from tests.core.test_consumer_support import Harness, topic_id

ORDERS = topic_id(0)


def regex_group(*regexes: str) -> Harness:
    h = Harness()
    for i, regex in enumerate(regexes):
        h.poll(h.client(f"m{i}", topics=None, regex=regex))
    h.settle()
    h.round()
    return h


def test_members_all_on_one_regex_are_homogeneous() -> None:
    h = regex_group("orders|payments", "orders|payments", "orders|payments")
    assert h.group.resolved_regexes["orders|payments"].topics == frozenset({"orders", "payments"})
    assert h.group.subscription_type() is SubscriptionType.HOMOGENEOUS


def test_two_regexes_are_heterogeneous() -> None:
    h = regex_group("orders|payments", "orders")
    assert h.group.subscription_type() is SubscriptionType.HETEROGENEOUS


def spec(*members: tuple[str, str | None]) -> GroupSpec:
    return GroupSpec(
        {m: MemberSpec(m, iid, None, frozenset({ORDERS}), EMPTY_PARTITIONS) for m, iid in members},
        SubscriptionType.HOMOGENEOUS,
        {ORDERS: 4},
    )


def test_range_puts_static_members_first_by_instance_id() -> None:
    result = RangeAssignor().assign(spec(("a", None), ("b", "z"), ("c", "y")))
    assert {m: sorted(a[ORDERS]) for m, a in result.items()} == {
        "c": [0, 1], "b": [2], "a": [3],
    }


@pytest.mark.parametrize("assignor", [RangeAssignor(), UniformAssignor()])
def test_an_assignor_names_a_topic_it_was_not_given(assignor: RangeAssignor) -> None:
    unknown = uuid.UUID(int=99)
    bad = GroupSpec(
        {"a": MemberSpec("a", None, None, frozenset({unknown}), EMPTY_PARTITIONS)},
        SubscriptionType.HOMOGENEOUS,
        {ORDERS: 4},
    )
    said = f"subscribes? to topic {unknown}, which does not exist"
    with pytest.raises(AssignorError, match=said):
        assignor.assign(bad)


def assignor_of_last_run(*asked: str | None) -> str:
    """The assignor of the target run after members asking for these assignors joined."""
    h = Harness()
    for i, name in enumerate(asked):
        h.poll(h.client(f"m{i}", assignor=name))
    h.settle()
    (*_, last) = [e for e in h.events if isinstance(e, TargetAssignmentComputed)]
    return last.assignor


def test_the_assignor_most_members_ask_for_is_used() -> None:
    assert assignor_of_last_run("uniform", "range", "range") == "range"
    assert assignor_of_last_run("range", "uniform", "uniform") == "uniform"
    assert assignor_of_last_run(None, None) == "uniform"  # the default: the first configured


def test_a_tie_goes_to_the_first_configured_assignor_not_the_first_name() -> None:
    assert assignor_of_last_run("range", "uniform") == "uniform"
    h = Harness(config=ConsumerGroupConfig(assignors=("range", "uniform")))
    h.poll(h.client("a", assignor="uniform"))
    h.poll(h.client("b", assignor="range"))
    h.settle()
    assert h.group.preferred_server_assignor(h.config.assignors) == "range"


def joined(h: Harness, member_id: str, names: tuple[str, ...], regex: str | None) -> None:
    response = h.send(member_id=member_id, member_epoch=0, rebalance_timeout_ms=30_000,
                      subscribed_topic_names=names, subscribed_topic_regex=regex,
                      topic_partitions=())  # fmt: skip
    assert response.error.name == "none"


@pytest.mark.parametrize(("a_names", "b_regex"), [
    (("audit",), "orders|payments"),  # a has names besides the regex all members share
    ((), None),  # b subscribes to nothing: the regex's topics are not every member's
])
def test_one_regex_with_names_or_a_member_without_it_is_heterogeneous(
    a_names: tuple[str, ...], b_regex: str | None
) -> None:
    """Kafka's subscriptionType: every topic must be subscribed by every member."""
    h = Harness()
    joined(h, "a", a_names, "orders|payments")
    joined(h, "b", (), b_regex)
    assert h.group.subscription_type() is SubscriptionType.HETEROGENEOUS

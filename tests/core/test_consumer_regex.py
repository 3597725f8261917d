"""Regex subscriptions: RE2-compatible validation, resolution, and what a regex change triggers."""

from __future__ import annotations

import uuid

import pytest

from coordinator.core.consumer.records import ConsumerGroupRegularExpressionKey
from coordinator.core.consumer.regex import InvalidRegex, compile_regex, resolve
from coordinator.core.topics import TopicInfo
from tests.core.test_consumer_support import Harness, snapshot


@pytest.mark.parametrize(
    "regex",
    [r"(a)\1", r"(?P<x>a)(?P=x)", r"\k<x>", "a(?=b)", "a(?!b)", "(?<=a)b", "(?<!a)b",
     "(?>ab)", "a*+", "a++", "a?+", "a{2}+", r"a\Z", "(?x)a", "(?(1)a|b)", "(?#c)a", "(a"],
)  # fmt: skip
def test_constructs_re2_rejects_are_invalid(regex: str) -> None:
    with pytest.raises(InvalidRegex):
        compile_regex(regex)


@pytest.mark.parametrize(
    "regex", ["orders", "ord.*", "(?i)ORDERS", "[a-z]+", r"a\+", "[+*]+", "a{1,3}", "(?P<n>x)"]
)
def test_re2_compatible_regexes_compile(regex: str) -> None:
    compile_regex(regex)


def test_the_whole_name_must_match() -> None:
    names = ["orders", "orders-eu", "my-orders"]
    assert resolve("orders.*", names) == {"orders", "orders-eu"}
    assert resolve("orders", names) == {"orders"}


def test_regex_member_gets_the_matching_topics_and_new_ones() -> None:
    h = Harness()
    a = h.client("a", topics=None, regex="(orders|pay.*)")
    h.poll(a)  # the subscription bumps the epoch; Kafka resolves the regex in a later step
    assert (a.epoch, a.owned_set()) == (2, set())
    h.poll(a)  # the group's next heartbeat resolves it and bumps the epoch
    assert (a.epoch, a.owned_set()) == (3, h.partitions_of("orders", "payments"))
    keys = [r.key for r in h.records if isinstance(r.key, ConsumerGroupRegularExpressionKey)]
    assert keys == [ConsumerGroupRegularExpressionKey("g", "(orders|pay.*)")]
    epoch = h.group.group_epoch
    h.catalog.put(TopicInfo("payouts", uuid.UUID(int=77), 2))
    h.core.topic_changed("payouts")
    h.settle()
    assert h.group.group_epoch == epoch + 1
    assert a.owned_set() == h.partitions_of("orders", "payments", "payouts")
    h.catalog.remove("payouts")
    h.core.topic_changed("payouts")
    h.settle()
    assert a.owned_set() == h.partitions_of("orders", "payments")
    assert snapshot(h.replayed()["g"]) == snapshot(h.group)


def test_regex_and_names_members_share_a_group() -> None:
    h = Harness()
    a = h.client("a", topics=None, regex="orders")
    b = h.client("b", topics=("orders", "payments"))
    h.settle()
    assert a.owned_set() | b.owned_set() == h.partitions_of("orders", "payments")
    assert not (a.owned_set() & h.partitions_of("payments"))
    h.check_invariants()


def test_last_member_of_a_regex_leaving_deletes_its_resolution() -> None:
    h = Harness()
    a = h.client("a", topics=None, regex="orders")
    h.client("b")
    h.settle()
    h.leave(a)
    tombstones = [
        r for r in h.records if isinstance(r.key, ConsumerGroupRegularExpressionKey) and not r.value
    ]
    assert len(tombstones) == 1 and not h.group.resolved_regexes


def test_an_invalid_regex_is_refused_without_records() -> None:
    h = Harness()
    r = h.send(
        member_id="a",
        member_epoch=0,
        rebalance_timeout_ms=1,
        subscribed_topic_regex="(a)\\1",
        topic_partitions=(),
    )
    assert r.error.name == "invalid_regular_expression" and "backreference" in (
        r.error_message or ""
    )
    assert not h.records and "g" not in h.core.groups


def test_a_literal_resubscribed_as_regex_plus_literal_is_assigned_in_two_steps() -> None:
    """librdkafka's 0045 resubscribe_with_regex against Kafka: the heartbeat that adds a regex
    keeps the literal topic's partitions (the intermediate assignment); the regex's topics come
    with the next epoch, once it is resolved."""
    h = Harness()
    a = h.client("a", topics=("orders",))
    h.settle()
    assert a.owned_set() == h.partitions_of("orders")
    epoch = h.group.group_epoch
    r = h.send(member_id="a", member_epoch=a.epoch, rebalance_timeout_ms=30_000,
               subscribed_topic_names=("orders",), subscribed_topic_regex="pay.*",
               topic_partitions=a.owned_tps())  # fmt: skip
    assert r.error.name == "none" and r.member_epoch == epoch + 1  # the subscription changed
    assert r.assignment is not None
    assert {(tp.topic_id, p) for tp in r.assignment for p in tp.partitions} == h.partitions_of(
        "orders"
    )
    a.regex, a.topics = "pay.*", ("orders",)
    r = h.send(member_id="a", member_epoch=r.member_epoch, topic_partitions=a.owned_tps())
    assert r.member_epoch == epoch + 2
    assert r.assignment is not None
    got = {(tp.topic_id, p) for tp in r.assignment for p in tp.partitions}
    assert got == h.partitions_of("orders", "payments")

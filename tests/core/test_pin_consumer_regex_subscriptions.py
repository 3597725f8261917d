"""Regex subscriptions of a KIP-848 group as heartbeats change them (Kafka's
maybeUpdateRegularExpressions), and the rebalance events around them, pinned where `make
mutation` found them loose: a regex's record is tombstoned only when its last user leaves it;
taking up a regex the group already resolved bumps the epoch at once; dropping a regex for
nothing bumps it too; a refresh writes and bumps only for a regex whose topics changed, and
goes on to the next regex after an unchanged one; the record's timestamp is wall time; a
rebalance's start is its first bump and its last bump is the one RebalanceSettled names; a
member reconciled once is reported once."""

from __future__ import annotations

from coordinator.core.consumer.messages import (
    GroupEpochBumped,
    MemberReconciled,
    RebalanceSettled,
)
from coordinator.core.consumer.records import (
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
)
from coordinator.core.topics import TopicInfo
from tests.core.test_consumer_support import Harness, topic_id

PAY = ConsumerGroupRegularExpressionKey("g", "pay.*")


def regex_records(h: Harness, since: int = 0) -> list[ConsumerGroupRecord]:
    return [r for r in h.records[since:] if isinstance(r.key, ConsumerGroupRegularExpressionKey)]


def resolved(h: Harness, regex: str, *names: str) -> None:
    """Members subscribing to `regex` join, then heartbeat once more: the regex is resolved."""
    for name in names:
        h.poll(h.client(name, topics=None, regex=regex))
    h.settle()
    h.round()


def switch(h: Harness, name: str, names: tuple[str, ...] | None, regex: str) -> None:
    """The member's heartbeat changing its subscription ("" clears its regex, None names keep
    the member's)."""
    c = h.clients[name]
    response = h.send(member_id=name, member_epoch=c.epoch, subscribed_topic_names=names,
                      subscribed_topic_regex=regex, topic_partitions=c.owned_tps())  # fmt: skip
    assert response.error.name == "none", response
    c.epoch = response.member_epoch


def test_a_regex_is_tombstoned_only_when_its_last_user_leaves_it() -> None:
    h = Harness()
    resolved(h, "pay.*", "a", "b")
    assert "pay.*" in h.group.resolved_regexes
    written = len(h.records)
    switch(h, "a", ("orders",), "")  # b still uses it
    assert regex_records(h, written) == [] and "pay.*" in h.group.resolved_regexes
    switch(h, "b", ("orders",), "")  # the last user: its tombstone
    assert regex_records(h, written) == [ConsumerGroupRecord(PAY, None)]
    assert "pay.*" not in h.group.resolved_regexes


def test_taking_up_a_regex_the_group_resolved_bumps_the_epoch_at_once() -> None:
    h = Harness()
    resolved(h, "pay.*", "a")
    b = h.client("b")
    h.settle()
    epoch = h.group.group_epoch
    assert b.epoch == epoch
    switch(h, "b", None, "pay.*")  # its names unchanged: only the regex changes
    assert h.group.group_epoch == epoch + 1  # its topics are known: a bump at once
    assert h.group.assignment_epoch == epoch + 1


def test_dropping_a_regex_for_nothing_bumps_the_epoch() -> None:
    h = Harness()
    resolved(h, "pay.*", "b")
    h.poll(h.client("a", topics=None, regex="zz.*"))  # a new regex, resolved a heartbeat later
    epoch = h.group.group_epoch
    switch(h, "b", (), "")
    assert h.group.group_epoch == epoch + 1
    assert h.group.target_assignment["b"] == {}


def test_a_refresh_writes_only_the_regexes_whose_topics_changed() -> None:
    h = Harness()
    resolved(h, "au.*", "a")
    resolved(h, "pay.*", "b")
    epoch = h.group.group_epoch
    written = len(h.records)
    info = h.catalog.get("orders")
    assert info is not None
    h.catalog.put(info.with_partitions(9))  # read by neither regex
    h.core.topic_changed("orders")
    h.round()
    assert regex_records(h, written) == [] and h.group.group_epoch == epoch
    h.core.epoch_offset_ms = 1_700_000_000_000  # wall time = now + the offset
    h.catalog.put(TopicInfo("payouts", topic_id(9), 2))
    h.core.topic_changed("payouts")
    h.round()
    (record,) = regex_records(h, written)  # au.* unchanged, pay.* after it gains payouts
    assert record.key == PAY
    assert isinstance(record.value, ConsumerGroupRegularExpressionValue)
    assert record.value.topics == ("payments", "payouts")
    assert record.value.timestamp_ms == h.clock.now - 1_000 + 1_700_000_000_000
    assert h.group.group_epoch == epoch + 1


def test_a_rebalance_starts_at_its_first_bump_and_names_its_last() -> None:
    h = Harness()
    h.client("a")
    h.settle()
    h.events.clear()
    first = h.clock.now
    h.poll(h.client("b"))
    h.clock.now += 100
    h.poll(h.client("c"))
    (last,) = [e for e in h.events if isinstance(e, GroupEpochBumped) and e.member_id == "c"]
    h.settle()
    (settled,) = [e for e in h.events if isinstance(e, RebalanceSettled)]
    assert settled.started_ms == first and settled.bump == last
    reconciled = [e.member_id for e in h.events if isinstance(e, MemberReconciled)]
    assert sorted(reconciled) == ["a", "b", "c"]  # each once


def test_a_member_reconciled_once_is_reported_once() -> None:
    h = Harness()
    a = h.client("a")
    h.settle()
    h.poll(h.client("b"))
    h.events.clear()
    h.poll(a)
    h.poll(a)  # a revoked: reconciled at the new epoch, while b still waits
    assert [e.member_id for e in h.events if isinstance(e, MemberReconciled)] == ["a"]
    h.poll(a)
    h.poll(a)
    assert [e.member_id for e in h.events if isinstance(e, MemberReconciled)] == ["a"]

"""KIP-848 groups' admin answers, pinned where `make mutation` found them loose: what
ConsumerGroupDescribe tells of each member, and what DeleteGroups writes for an empty group."""

from __future__ import annotations

from coordinator.core.consumer import TopicPartitions, replay
from coordinator.core.consumer.member_update import owns_subset
from coordinator.core.consumer.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from coordinator.core.messages import ErrorCode
from tests.core.test_consumer_support import Harness, topic_id


def test_describe_tells_every_members_fields_and_target() -> None:
    h = Harness()
    h.send(member_id="a", member_epoch=0, instance_id="i-a", rack_id="r1",
           rebalance_timeout_ms=5_000, subscribed_topic_names=("payments", "orders"),
           topic_partitions=(), client_id="app-a", client_host="/10.0.0.1")  # fmt: skip
    h.send(member_id="b", member_epoch=0, rebalance_timeout_ms=5_000,
           subscribed_topic_regex="au.*", topic_partitions=(), client_id="app-b",
           client_host="/10.0.0.2")  # fmt: skip
    h.send(member_id="c", member_epoch=0, rebalance_timeout_ms=5_000,
           subscribed_topic_names=("no-such-topic",), topic_partitions=())  # fmt: skip
    described = h.core.describe("g")
    assert described is not None and described.group_id == "g"
    a, b, c = described.members
    group = h.group
    assert (a.member_id, a.instance_id, a.rack_id, a.client_id, a.client_host) == (
        "a", "i-a", "r1", "app-a", "/10.0.0.1")
    assert a.member_epoch == group.members["a"].member_epoch > 0
    assert a.member_state is group.members["a"].state
    assert a.subscribed_topic_names == ("orders", "payments")  # sorted
    assert a.subscribed_topic_regex is None and a.classic is False
    orders, payments = topic_id(0), topic_id(1)
    assert {tp.topic_id for tp in a.target_assignment} == {orders, payments}
    assert (b.instance_id, b.rack_id, b.subscribed_topic_names, b.subscribed_topic_regex) == (
        None, None, (), "au.*")
    assert b.target_assignment == (TopicPartitions(topic_id(2), (0,)),)
    assert c.target_assignment == () and c.assignment == ()
    assert described.members == h.core.describe("g").members  # type: ignore[union-attr]
    assert h.core.describe("nope") is None


def test_deleting_an_empty_group_tombstones_its_regexes_and_metadata() -> None:
    h = Harness()
    a, b = h.client("a", topics=None, regex="pay.*"), h.client("b", topics=None, regex="or.*")
    h.settle()
    assert h.core.delete_group("g") == (ErrorCode.non_empty_group, ())
    h.leave(a)
    h.leave(b)
    # A log whose regexes outlived their members (the leaves' regex tombstones lost to an older
    # writer): the group loads empty with both regexes, and deleting it tombstones them too.
    kept = [r for r in h.records
            if not (isinstance(r.key, ConsumerGroupRegularExpressionKey) and r.value is None)]
    # and a Kafka 4.0 subscription metadata record, which groupcoord never writes
    kept.append(ConsumerGroupRecord(ConsumerGroupPartitionMetadataKey("g"),
                                    ConsumerGroupPartitionMetadataValue()))  # fmt: skip
    loaded = Harness()
    for record in kept:
        replay(loaded.core.groups, record)
    loaded.core.finish_loading(loaded.clock.now)
    group = loaded.group
    assert group.members == {} and sorted(group.resolved_regexes) == ["or.*", "pay.*"]
    assert group.has_subscription_metadata_record
    error, records = loaded.core.delete_group("g")
    assert error is ErrorCode.none and all(r.value is None for r in records)
    expected = [ConsumerGroupRegularExpressionKey("g", "or.*"),
                ConsumerGroupRegularExpressionKey("g", "pay.*"),
                ConsumerGroupTargetAssignmentMetadataKey("g"),
                ConsumerGroupPartitionMetadataKey("g"), ConsumerGroupMetadataKey("g")]  # fmt: skip
    assert [r.key for r in records] == expected
    assert loaded.core.delete_group("nope") == (ErrorCode.group_id_not_found, ())


def test_unloading_a_group_forgets_it_and_its_timers_and_a_reload_resumes_it() -> None:
    h = Harness()
    h.client("a")
    h.client("b", topics=("orders", "payments"))
    h.settle()
    before = {mid: (m.member_epoch, m.assigned_partitions) for mid, m in h.group.members.items()}
    assert h.core.next_deadline_ms() is not None
    h.core.unload_group("g")
    h.core.unload_group("g")  # twice: nothing more to forget
    assert "g" not in h.core.groups and h.core.describe("g") is None
    assert h.core.next_deadline_ms() is None  # no session or rebalance timer is left
    for record in h.records:  # the new owner's load, here the same core
        replay(h.core.groups, record)
    h.core.finish_loading(h.clock.now)
    assert {mid: (m.member_epoch, m.assigned_partitions)
            for mid, m in h.group.members.items()} == before  # fmt: skip
    h.settle()
    assert {mid: m.member_epoch for mid, m in h.group.members.items()} == {
        mid: epoch for mid, (epoch, _) in before.items()}  # nothing to rebalance


def test_owned_partitions_left_out_of_a_heartbeat_are_no_subset() -> None:
    """A heartbeat without owned partitions (null: unchanged) says nothing of what it owns."""
    tid = topic_id(0)
    assert not owns_subset(None, {})
    assert not owns_subset(None, {tid: frozenset({1})})
    assert owns_subset((), {})
    assert owns_subset((TopicPartitions(tid, (1,)),), {tid: frozenset({1, 2})})
    assert not owns_subset((TopicPartitions(tid, (3,)),), {tid: frozenset({1, 2})})

"""A KIP-848 group loaded from its records (finish_loading, Kafka's onLoaded) and the topic
changes it sees, pinned where `make mutation` found them loose: only the groups named are
rearmed; each member's session timeout starts at the load (a classic member's its own), and a
rebalance timeout only for a consumer-protocol member with partitions to revoke; a regex is
resolved again (topics may have been created meanwhile); a Kafka 4.0 subscription-metadata record
is tombstoned by the first metadata update; the version a resolved regex records counts the
topic changes seen; and the group's topic-hash index follows its subscription."""

from __future__ import annotations

from coordinator.core.consumer.messages import GroupEpochBumped, MemberRemoved
from coordinator.core.consumer.model import MemberState
from coordinator.core.consumer.records import (
    ConsumerGroupPartitionMetadataKey,
    ConsumerGroupPartitionMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupRegularExpressionKey,
    ConsumerGroupRegularExpressionValue,
)
from coordinator.core.topics import TopicInfo
from tests.core.test_consumer_support import Harness, topic_id
from tests.core.test_pin_consumer_classic_member import classic_join

SESSION_MS = 45_000


def loaded(h: Harness, group_ids: list[str] | None = None) -> Harness:
    """A new coordinator that replays h's records and finishes loading at h's time."""
    other = Harness(config=h.config)
    other.clock.now = h.clock.now
    other.records = list(h.records)
    for record in h.records:
        other.core.replay(record)
    other.core.finish_loading(other.clock.now, group_ids)
    return other


def test_loading_rearms_sessions_and_only_the_revoking_members_rebalance_timeout() -> None:
    h = Harness()
    a = h.client("a", rebalance_timeout_ms=5_000)
    h.settle()
    h.poll(h.client("b", rebalance_timeout_ms=5_000))
    h.poll(a)  # a is revoking for b
    assert h.group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    classic = classic_join(h).member_id  # its session timeout: 6 s
    h.clock.now += 1_000
    other = loaded(h)
    other.advance(5_000 - 1)
    assert set(other.group.members) == {"a", "b", classic}
    other.advance(1)  # a's rebalance timeout, from the load
    assert set(other.group.members) == {"b", classic}
    assert [(e.member_id, e.reason) for e in other.events if isinstance(e, MemberRemoved)] == [
        ("a", "rebalance_timeout")]  # fmt: skip
    other.advance(1_000 - 1)
    assert classic in other.group.members
    other.advance(1)  # the classic member's own session timeout (6 s) from the load
    assert set(other.group.members) == {"b"}
    other.advance(SESSION_MS - 6_000 - 1)
    assert set(other.group.members) == {"b"}
    other.advance(1)  # b's session timeout (45 s) from the load
    assert other.group.members == {}


def test_loading_one_group_leaves_the_others_timers_alone() -> None:
    h = Harness()
    h.client("a")
    h.settle()
    other = loaded(h)
    other.clock.now += 10_000
    other.core.finish_loading(other.clock.now, ["not-this-one"])
    assert other.core.next_deadline_ms() == h.clock.now + SESSION_MS  # not rearmed


def test_a_loaded_regex_is_resolved_again_with_the_topics_created_meanwhile() -> None:
    h = Harness()
    h.poll(h.client("a", topics=None, regex="pay.*"))
    h.settle()
    h.round()  # resolved: payments
    assert h.group.resolved_regexes["pay.*"].topics == {"payments"}
    other = Harness()
    other.clock.now = h.clock.now
    other.catalog.put(TopicInfo("payouts", topic_id(7), 2))  # created while nobody owned g
    for record in h.records:
        other.core.replay(record)
    other.core.finish_loading(other.clock.now)
    other.clients = h.clients
    other.settle()
    assert other.group.resolved_regexes["pay.*"].topics == {"payments", "payouts"}


def test_a_kafka_40_subscription_metadata_record_is_tombstoned_by_the_next_update() -> None:
    h = Harness()
    h.client("a")
    h.settle()
    h.records.append(ConsumerGroupRecord(ConsumerGroupPartitionMetadataKey("g"),
                                         ConsumerGroupPartitionMetadataValue()))  # fmt: skip
    other = loaded(h)
    assert other.group.has_subscription_metadata_record
    other.clients = h.clients
    written = len(other.records)
    other.settle()
    assert ConsumerGroupRecord(ConsumerGroupPartitionMetadataKey("g"), None) in (
        other.records[written:])  # fmt: skip
    assert not other.group.has_subscription_metadata_record


def test_a_resolved_regex_records_how_many_topic_changes_were_seen() -> None:
    h = Harness()
    a = h.client("a", topics=None, regex="pay.*")
    h.settle()
    h.poll(a)  # the heartbeat after the one that subscribed resolves the regex

    def version() -> int:
        values = [r.value for r in h.records
                  if r.key == ConsumerGroupRegularExpressionKey("g", "pay.*")]  # fmt: skip
        assert isinstance(values[-1], ConsumerGroupRegularExpressionValue)
        return values[-1].version

    assert version() == 0
    for i, name in enumerate(("payouts", "payroll"), start=1):
        h.catalog.put(TopicInfo(name, topic_id(10 + i), 1))
        h.core.topic_changed(name)
        h.poll(a)
        assert version() == i


def test_a_loaded_group_sees_a_topic_change_before_its_first_heartbeat() -> None:
    h = Harness()
    h.client("a", topics=("orders", "payments"))
    h.settle()
    other = loaded(h)
    info = other.catalog.get("orders")
    assert info is not None
    other.catalog.put(info.with_partitions(9))
    other.core.topic_changed("orders")  # no heartbeat since the load: nothing hashed yet
    other.clients = h.clients
    other.settle()
    assert len(other.group.members["a"].assigned_partitions[topic_id(0)]) == 9
    bumps = [e for e in other.events if isinstance(e, GroupEpochBumped)]
    assert [(e.cause, e.topics) for e in bumps] == [("metadata_changed", ("orders",))]


def test_the_topic_hash_index_follows_a_subscription_change() -> None:
    h = Harness()
    a = h.client("a")
    h.settle()
    assert h.core._hashes.readers("orders") == {"g"}
    a.topics = ("payments",)
    h.poll(a, full=True)
    assert not h.core._hashes.readers("orders") and "orders" not in h.core._hashes
    assert h.core._hashes.readers("payments") == {"g"}


def test_a_loaded_members_rebalance_timeout_ends_with_its_revocation() -> None:
    """The rebalance timeout rearmed by the load is the member's REBALANCE timer: revoking
    cancels it, so it no longer wakes the coordinator."""
    h = Harness()
    a = h.client("a", rebalance_timeout_ms=5_000)
    h.settle()
    h.poll(h.client("b"))
    h.poll(a)  # a is revoking for b
    other = loaded(h)
    assert other.core.next_deadline_ms() == other.clock.now + 5_000
    other.clients = h.clients
    other.poll(a)  # a reports it revoked: at the new epoch, no rebalance timeout any more
    assert other.group.members["a"].state is not MemberState.UNREVOKED_PARTITIONS
    assert other.core.next_deadline_ms() == other.clock.now + SESSION_MS

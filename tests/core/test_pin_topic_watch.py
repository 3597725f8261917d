"""The KIP-1101 trigger and the declared topics (coordinator.core.topic_watch), pinned where
mutation testing found them loose (issue 28, `make mutation`).

- A declared topic the log never saw and the catalog lacks is created: a group that reads it
  rebalances (TOPIC_CREATED), its record is the declared topic; declaring it again later grows it.
- A topic changed at run time counts as seen by the log: a later declaration grows it.
- Each group reading a changed topic is checked on its own: one that needs nothing (Empty, or
  its hash unchanged) does not stop the check of the next.
- A name deleted exactly TOPIC_DELETED_LABEL_MS ago is still "recently deleted" (TOPIC_RECREATED).
- A deleted topic's offsets go in every group that has some, counted per group; the rebalance
  counter counts every metadata rebalance; replaying a topic record means the core is loading.
"""

from __future__ import annotations

import uuid

import pytest

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import (
    GroupMetadataHashChanged,
    OffsetsDeleted,
    RebalanceCause,
    RebalanceStarted,
)
from coordinator.core.rebalance import TOPIC_DELETED_LABEL_MS
from coordinator.core.records import OffsetCommitKey, TopicKey, TopicValue
from coordinator.core.topics import TopicInfo
from tests.core.test_topic_trigger import change, grown, restarted
from tests.support.fakeclock import Harness, catalog, subscription

FRESH = TopicInfo("fresh", uuid.UUID(int=99), 3)


def subscribed(*topics: str) -> tuple[tuple[str, bytes], ...]:
    return (("range", subscription(*topics)),)


def started(h: Harness) -> list[tuple[str, RebalanceCause]]:
    return [(e.group_id, e.cause) for e in h.events_of(RebalanceStarted)]


def quiet() -> Harness:
    return Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))


def test_a_declared_topic_new_to_log_and_catalog_is_created_for_its_readers() -> None:
    h = quiet()
    h.stable_group("g", 1, protocols=subscribed("fresh"))  # reads a topic that does not exist
    h.events.clear()
    fx = h.absorb(h.core.declare_topics([FRESH], h.now))
    assert h.core.topics.get("fresh") == FRESH
    assert [(r.key, r.value) for r in fx.records if isinstance(r.key, TopicKey)] == [
        (TopicKey("fresh"), TopicValue(FRESH.topic_id.bytes, 3, ()))
    ]
    changed = h.events_of(GroupMetadataHashChanged)
    assert [(e.group_id, e.topics, e.cause) for e in changed] == [
        ("g", ("fresh",), RebalanceCause.TOPIC_CREATED)
    ]
    assert started(h) == [("g", RebalanceCause.TOPIC_CREATED)]
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    # Declared again with more partitions: the log has it now, so it grows.
    h.absorb(h.core.declare_topics([FRESH.with_partitions(5)], h.now))
    assert h.core.topics.partition_count("fresh") == 5


def test_a_declared_topic_the_catalog_already_has_is_persisted_without_a_rebalance() -> None:
    h = quiet()
    h.stable_group("g", 1)
    h.events.clear()
    orders = h.catalog.get("orders")
    assert orders is not None
    fx = h.core.declare_topics([orders], h.now)
    assert [r.key for r in fx.records] == [TopicKey("orders")] and not fx.events


def test_a_topic_changed_at_run_time_grows_to_a_larger_declaration() -> None:
    h = quiet()
    change(h, "orders", grown(h, "orders", 6))
    h.absorb(h.core.declare_topics([grown(h, "orders", 8)], h.now))
    assert h.core.topics.partition_count("orders") == 8


def test_each_reader_of_a_changed_topic_is_checked_on_its_own() -> None:
    h = quiet()
    # "a" (sorted first) reads orders but is Empty; "b" reads it and is Stable.
    ids, _, _ = h.stable_group("a", 1)
    h.leave("a", (ids[0], None))
    assert h.core.group("a").state == "Empty"  # type: ignore[union-attr]
    h.core.topic_hashes.subscribe("a", frozenset(), frozenset({"orders"}))
    h.stable_group("b", 1)
    h.events.clear()
    change(h, "orders", grown(h, "orders", 8))
    assert started(h) == [("b", RebalanceCause.PARTITIONS_ADDED)]


def test_a_reader_whose_hash_did_not_change_does_not_stop_the_check() -> None:
    h = quiet()
    racked = TopicInfo("racked", uuid.UUID(int=50), 1, (("r1", "r2"),))
    gone = TopicInfo("gone", uuid.UUID(int=51), 1)
    change(h, "racked", racked)
    change(h, "gone", gone)
    h.stable_group("a", 1, protocols=subscribed("racked"))
    # "b" reads racked and gone, and is CompletingRebalance when gone is deleted: its record
    # keeps the hash it was formed with (topic_watch._deleted), so once Stable it still differs.
    rt = h.join("b", version=3, protocols=subscribed("racked", "gone"))
    h.advance(1)
    joined = h.reply(rt)
    change(h, "gone", None)
    h.sync("b", joined.member_id, joined.generation_id, {joined.member_id: b"x"})
    assert h.core.group("b").state == "Stable"  # type: ignore[union-attr]
    h.events.clear()
    # The same racks in another order: the same topic hash, so "a" needs nothing.
    change(h, "racked", TopicInfo("racked", racked.topic_id, 1, (("r2", "r1"),)))
    assert started(h) == [("b", RebalanceCause.RACKS_CHANGED)]
    assert h.core.topic_hashes.rebalances == 1


def test_a_name_deleted_exactly_the_label_window_ago_is_recreated() -> None:
    h = quiet()
    h.stable_group("g", 1, protocols=subscribed("fresh"))
    change(h, "fresh", FRESH)
    h.advance(1)
    ids = [m.member_id for m in h.core.group("g").members]  # type: ignore[union-attr]
    rt = h.join("g", ids[0], protocols=subscribed("fresh"))  # the leader rejoins: new hash
    h.advance(1)
    h.sync("g", ids[0], h.reply(rt).generation_id, {ids[0]: b"x"})
    change(h, "fresh", None)
    deleted_at = h.now
    for _ in range(TOPIC_DELETED_LABEL_MS // 5_000):  # the member keeps its session
        h.advance(5_000)
        assert h.heartbeat("g", ids[0], h.reply(rt).generation_id).error.name == "none"
    assert h.now == deleted_at + TOPIC_DELETED_LABEL_MS
    h.events.clear()
    change(h, "fresh", TopicInfo("fresh", uuid.UUID(int=100), 3))
    assert started(h) == [("g", RebalanceCause.TOPIC_RECREATED)]


def test_a_deleted_topics_offsets_go_in_every_group_that_has_some() -> None:
    h = quiet()
    h.commit("a", {("payments", 0): 1})
    h.commit("b", {("orders", 0): 5, ("orders", 1): 6})
    h.events.clear()
    before = len(h.records)
    change(h, "orders", None)
    assert {r.key for r in h.records[before:] if r.value is None} >= {
        OffsetCommitKey("b", "orders", 0),
        OffsetCommitKey("b", "orders", 1),
    }
    assert [(e.group_id, e.partitions) for e in h.events_of(OffsetsDeleted)] == [("b", 2)]


def test_two_metadata_rebalances_count_two() -> None:
    h = quiet()
    h.stable_group("g", 1)
    change(h, "orders", grown(h, "orders", 8))
    ids = [m.member_id for m in h.core.group("g").members]  # type: ignore[union-attr]
    rt = h.join("g", ids[0])
    h.advance(1)
    h.sync("g", ids[0], h.reply(rt).generation_id, {ids[0]: b"x"})
    change(h, "orders", grown(h, "orders", 9))
    assert h.core.topic_hashes.rebalances == 2


def test_replaying_a_topic_record_means_loading() -> None:
    h = quiet()
    h.core.replay_topic(TopicKey("fresh"), TopicValue(FRESH.topic_id.bytes, 3, ()))
    assert h.core.loading is True
    assert h.call(h.join_cmd("g")).error.name == "coordinator_load_in_progress"
    h.core.finish_loading(h.now)
    assert h.call(h.join_cmd("g")).error.name == "member_id_required"


def test_a_topic_changed_with_another_topics_info_is_a_bug() -> None:
    h = quiet()
    with pytest.raises(ValueError, match=r"^topic_changed\('fresh'\) with the info of 'orders'$"):
        h.core.topic_changed("fresh", h.catalog.get("orders"), h.now)


def test_a_restart_checks_every_group_and_names_what_changed() -> None:
    """Groups replay in log order: "a" (reads payments, unchanged) comes before "b" (reads
    orders, grown while groupcoord was down); "b" still rebalances, with the topics and cause
    named, and keeps its generation's hash until the next generation is formed."""
    h = Harness()
    h.stable_group("a", 1, protocols=subscribed("payments"))
    h.stable_group("b", 1)
    stored = h.core.state.groups["b"].metadata_hash
    later = catalog()
    later.put(grown(h, "orders", 12))
    core, events = restarted(h, later)
    changed = [e for e in events if isinstance(e, GroupMetadataHashChanged)]
    assert [(e.group_id, e.topics, e.cause) for e in changed] == [
        ("b", ("orders",), RebalanceCause.METADATA_CHANGED)
    ]
    assert [(e.group_id, e.cause) for e in events if isinstance(e, RebalanceStarted)] == [
        ("b", RebalanceCause.METADATA_CHANGED)
    ]
    b = core.state.groups["b"]
    assert b.metadata_hash == stored != 0
    assert core.group_record(b, h.now).value.metadata_hash == stored  # type: ignore[union-attr]

"""The topic catalog and the topic-hash cache's index, pinned where mutation testing found them
loose (issue 28, `make mutation`).

- The catalog's id -> name map follows re-creations: a topic's old id stops naming it, unless
  another topic holds that id by then. A grown topic keeps its racks; an inconsistent rack list
  is refused with its counts in the message.
- The cache's index: two groups reading one topic are both readers; the last reader leaving a
  topic whose hash was never cached (it does not exist) is fine; a topic invalidated while no
  generation re-read it, then left by its last reader, is not counted as a recomputation when
  a group reads it again. An unknown hash function is refused by name, with the known ones.
"""

from __future__ import annotations

import uuid

import pytest

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.topichash import TopicHashCache
from coordinator.core.topics import TopicCatalog, TopicInfo
from tests.core.test_topic_trigger import change, grown
from tests.support.fakeclock import Harness, subscription

ID1, ID2, ID3 = uuid.UUID(int=1), uuid.UUID(int=2), uuid.UUID(int=3)


def test_a_recreated_topics_old_id_stops_naming_it() -> None:
    catalog = TopicCatalog(())
    catalog.put(TopicInfo("orders", ID1, 4))
    catalog.put(TopicInfo("orders", ID2, 4))  # deleted and created again: a new id
    assert catalog.name_of(ID1) is None and catalog.name_of(ID2) == "orders"


def test_an_old_id_another_topic_holds_keeps_naming_that_topic() -> None:
    catalog = TopicCatalog(())
    catalog.put(TopicInfo("a", ID1, 1))
    catalog.put(TopicInfo("b", ID1, 1))  # the id now names "b"
    catalog.put(TopicInfo("a", ID3, 1))
    assert catalog.name_of(ID1) == "b" and catalog.name_of(ID3) == "a"


def test_a_grown_topic_keeps_its_racks() -> None:
    racked = TopicInfo("r", ID1, 2, (("r1",), ("r2", "r1")))
    assert racked.partition_racks(1) == ("r2", "r1")
    assert TopicInfo("plain", ID2, 2).partition_racks(1) == ()
    assert racked.with_partitions(3) == TopicInfo("r", ID1, 3, (("r1",), ("r2", "r1"), ()))
    assert TopicInfo("plain", ID2, 2).with_partitions(3).racks == ()


def test_an_inconsistent_rack_list_is_refused_with_its_counts() -> None:
    with pytest.raises(ValueError, match=r"^topic 'r': 1 rack entries for 2 partitions$"):
        TopicInfo("r", ID1, 2, (("r1",),))


def test_an_unknown_hash_function_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^unknown topic hash 'md5': use one of murmur3, xxh3$"):
        TopicHashCache(TopicCatalog(()), "md5")


def quiet() -> Harness:
    return Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))


def rejoin(h: Harness, group: str, *topics: str) -> None:
    """The one member rejoins with a new subscription and syncs: a new generation."""
    ids = [m.member_id for m in h.core.group(group).members]  # type: ignore[union-attr]
    rt = h.join(group, ids[0], protocols=(("range", subscription(*topics)),))
    h.advance(1)
    h.sync(group, ids[0], h.reply(rt).generation_id, {ids[0]: b"x"})


def test_two_groups_reading_a_topic_are_both_its_readers() -> None:
    h = quiet()
    h.stable_group("a", 1)
    h.stable_group("b", 1)
    assert h.core.topic_hashes.readers("orders") == {"a", "b"}


def test_the_last_reader_of_a_topic_that_does_not_exist_can_leave_it() -> None:
    h = quiet()
    h.stable_group("g", 1, protocols=(("range", subscription("ghost")),))
    assert h.core.topic_hashes.readers("ghost") == {"g"}
    rejoin(h, "g", "orders")
    assert not h.core.topic_hashes.readers("ghost")
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def test_a_topic_left_before_it_was_rehashed_is_not_counted_as_recomputed() -> None:
    h = quiet()
    ids, _, _ = h.stable_group("a", 2)  # reads orders: its hash is cached
    payments = (("range", subscription("payments")),)
    first = h.join("a", ids[0], protocols=payments)  # Preparing until the other rejoins
    change(h, "orders", grown(h, "orders", 8))  # invalidated; "a" is not re-checked now
    second = h.join("a", ids[1], protocols=payments)  # the new generation leaves orders
    generation = h.reply(first).generation_id
    h.sync("a", ids[1], generation)
    h.sync("a", h.reply(first).leader, generation, dict.fromkeys(ids, b"x"))
    assert h.reply(second).error.name == "none"
    cache = h.core.topic_hashes
    assert not cache.readers("orders") and cache.recomputations == 0
    h.stable_group("b", 1)  # a first computation of the grown topic's hash
    assert cache.readers("orders") == {"b"} and cache.recomputations == 0

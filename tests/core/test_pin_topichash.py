"""Topic hashes pinned where mutation testing found them loose (issue 28, `make mutation`).

The rack bytes are cached per process (coordinator/core/topichash.py), so a test that runs after
another one used the same racks never computes them: here the caches are emptied first, and the
layout of docs/protocol.md §13.3 is rebuilt field by field (hash4j writes ints and longs little
endian, and `putString` as the UTF-16LE code units followed by their count), then checked against
Kafka's XXH3 vector A (§13.5). And the hash cache's `untrack`: a group that is gone reads nothing.
"""

from __future__ import annotations

import struct
import uuid

from coordinator.core import topichash
from coordinator.core.group import ClassicGroup
from coordinator.core.topichash import HASH_FUNCTIONS, TopicHashCache, topic_hash_bytes
from coordinator.core.topics import TopicCatalog, TopicInfo

FOO = TopicInfo(
    "foo",
    uuid.UUID(int=(0x0123456789ABCDEF << 64) | 0xFEDCBA9876543210),
    2,
    (("rack1", "rack0"), ("rack2", "rack1")),
)


def put_int(v: int) -> bytes:
    return struct.pack("<i", v)


def put_string(s: str) -> bytes:
    units = s.encode("utf-16-le")
    return units + put_int(len(units) // 2)


def rack(r: str) -> bytes:
    """§13.3: an int of the rack's length, and then the rack as a string."""
    return put_int(len(r)) + put_string(r)


def test_rack_bytes_computed_from_a_cold_cache_follow_the_layout() -> None:
    topichash._rack_bytes.clear()
    topichash._partition_racks_bytes.clear()
    expected = (
        b"\x00"
        + struct.pack("<qq", 0x0123456789ABCDEF, 0xFEDCBA9876543210 - (1 << 64))
        + put_string("foo")
        + put_int(2)
        + put_int(0) + rack("rack0") + rack("rack1")  # sorted, in Java string order
        + put_int(1) + rack("rack1") + rack("rack2")
    )  # fmt: skip
    assert topic_hash_bytes(FOO) == expected
    topichash._rack_bytes.clear()
    topichash._partition_racks_bytes.clear()
    assert HASH_FUNCTIONS["xxh3"](topic_hash_bytes(FOO)) == 4231092367357902416  # §13.5, vector A
    assert topic_hash_bytes(FOO) == expected  # and again from the warm cache


def test_a_long_non_ascii_rack_counts_utf16_units() -> None:
    topichash._rack_bytes.clear()
    topichash._partition_racks_bytes.clear()
    name = "zone-é-\U0001f600" * 3  # 24 code points, 27 UTF-16 units
    topic = TopicInfo("t", uuid.UUID(int=7), 1, ((name,),))
    assert topic_hash_bytes(topic).endswith(put_int(0) + put_int(27) + put_string(name))


def test_an_untracked_group_reads_nothing_and_its_topics_hash_is_dropped() -> None:
    cache = TopicHashCache(TopicCatalog((TopicInfo("orders", uuid.UUID(int=1), 4),)))
    group = ClassicGroup("g", "consumer")
    topics = frozenset({"orders"})
    cache.subscribe("g", group.hashed_topics, topics)
    group.hashed_topics = topics
    cache.topic_hash("orders")
    assert cache.readers("orders") == {"g"} and "orders" in cache
    cache.untrack(group)
    assert not cache.readers("orders")
    assert "orders" not in cache
    assert group.hashed_topics == frozenset()
    cache.untrack(group)  # a second time: still nothing to read, nothing to fail
    assert group.hashed_topics == frozenset()


def test_a_topic_that_does_not_exist_hashes_to_zero_and_is_not_cached() -> None:
    cache = TopicHashCache(TopicCatalog((TopicInfo("orders", uuid.UUID(int=1), 4),)))
    cache.subscribe("g", frozenset(), frozenset({"orders", "gone"}))
    assert cache.topic_hash("gone") == 0  # docs/protocol.md §13.3
    assert "gone" not in cache


def test_recomputations_count_the_hashes_computed_again_after_a_change() -> None:
    cache = TopicHashCache(TopicCatalog((TopicInfo("orders", uuid.UUID(int=1), 4),)))
    cache.subscribe("g", frozenset(), frozenset({"orders"}))
    first = cache.topic_hash("orders")
    assert cache.recomputations == 0
    cache.invalidate("orders")
    assert cache.topic_hash("orders") == first  # the catalog did not change here
    assert cache.topic_hash("orders") == first  # cached again: not a recomputation
    assert cache.recomputations == 1
    cache.invalidate("orders")
    cache.topic_hash("orders")
    assert cache.recomputations == 2

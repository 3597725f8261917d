"""KIP-1101 topic hashes and group metadata hashes, and the cache that shares them (seed 002).

A topic's hash stands for everything a rebalance depends on (id, name, partition count, replica
racks), so a group needs to remember one int64 per generation instead of per-partition rack lists.

The byte layout is docs/protocol.md §13.3 (Kafka 4.1's `Utils.computeTopicHash`), fed to one of two
64-bit hash functions:
- `murmur3` (default, seed 002): Murmur3 x64 128-bit, seed 0; the first 64 bits as a signed long
  (Guava's `HashCode.asLong()`, i.e. `mmh3.hash64(...)[0]`).
- `xxh3`: XXH3-64, seed 0, read as a signed long: what Kafka 4.1 merged (hash4j); it reproduces the
  test vectors of docs/protocol.md §13.5.
The group hash (§13.4) hashes the topic hashes of the group's existing subscribed topics, sorted by
topic name, each as 8 little-endian bytes, with the same function: moving a value from one topic
to another changes it. No existing topics -> 0.

The cache (seed 002, "Topic Hash Map Cache in Coordinator"):
- a topic's hash is computed the first time a group needs it and then shared by every group;
- `invalidate(name)` drops it when the topic changes or is deleted; the next group that needs it
  recomputes it (counted in `recomputations`);
- it keeps hashes only of topics some group reads: the topic -> group ids index (`readers`) is
  updated whenever a group's subscription changes, and the last reader leaving evicts the hash.
Counters are plain int attributes (`entries`, `hits`, `misses`, `recomputations`,
`rebalances`) for coordinator.serve.metrics to read.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

import mmh3
import xxhash

from coordinator.core.topics import TopicCatalog, TopicInfo

if TYPE_CHECKING:
    from coordinator.core.group import ClassicGroup

__all__ = [
    "HASH_FUNCTIONS",
    "TOPIC_HASH_MAGIC_BYTE",
    "TopicHashCache",
    "group_hash",
    "group_hash_bytes",
    "java_sorted",
    "topic_hash",
    "topic_hash_bytes",
]

HashFunction = Callable[[bytes], int]

TOPIC_HASH_MAGIC_BYTE = b"\x00"  # Kafka's TOPIC_HASH_MAGIC_BYTE: changes if the layout changes
_I32 = struct.Struct("<i")
_I64 = struct.Struct("<q")
_UUID = struct.Struct("<qq")
_SIGN = 1 << 63
_MASK = (1 << 64) - 1


def _signed64(value: int) -> int:
    return value - (1 << 64) if value & _SIGN else value


def murmur3_64(data: bytes) -> int:
    """Murmur3 x64 128-bit (seed 0), first 64 bits as a signed long (Guava's asLong)."""
    h1: int = mmh3.hash64(data, 0, True, True)[0]
    return h1


def xxh3_64(data: bytes) -> int:
    """XXH3-64 (seed 0) as a signed long: hash4j's `Hashing.xxh3_64()` (docs/protocol.md §13.1)."""
    return _signed64(xxhash.xxh3_64_intdigest(data))


HASH_FUNCTIONS: dict[str, HashFunction] = {"murmur3": murmur3_64, "xxh3": xxh3_64}


# -- byte layout (§13.2, §13.3) -----------------------------------------------------------------


def _java_string(s: str) -> bytes:
    """hash4j `putString`: the UTF-16LE code units, then their count as a LE int32."""
    data = s.encode("utf-16-le")
    return data + _I32.pack(len(data) // 2)


def java_sorted(strings: Iterable[str]) -> list[str]:
    """Sorted in Java `String.compareTo` order (UTF-16 code units). For ASCII (every legal topic
    name) that is Python's order; otherwise compare the UTF-16BE bytes."""
    items = list(strings)
    if all(s.isascii() for s in items):
        items.sort()
    else:
        # Codec names are case-insensitive: "UTF-16-BE" is an equivalent mutant.
        items.sort(key=lambda s: s.encode("utf-16-be"))  # pragma: no mutate
    return items


_rack_bytes: dict[str, bytes] = {}
_partition_racks_bytes: dict[tuple[str, ...], bytes] = {}


def _encode_rack(rack: str) -> bytes:
    """`putInt(rack.length())` then `putString(rack)`: the length appears twice (§13.3)."""
    # The no-mutate lines only run the cache, and their mutants are equivalent (a lookup that
    # misses, a value not kept, a bound off by one): the same bytes are recomputed.
    b = _rack_bytes.get(rack)  # pragma: no mutate
    if b is None:
        encoded = _java_string(rack)
        b = _I32.pack(len(encoded) // 2 - 2) + encoded
        if len(_rack_bytes) > 65_536:  # pragma: no mutate
            _rack_bytes.clear()
        _rack_bytes[rack] = b  # pragma: no mutate
    return b


def _encode_partition_racks(racks: tuple[str, ...]) -> bytes:
    """A partition's racks, sorted, duplicates kept. Cached: catalogs intern rack tuples."""
    # Equivalent mutants, as in _encode_rack: the cache only saves recomputing the same bytes.
    b = _partition_racks_bytes.get(racks)  # pragma: no mutate
    if b is None:
        b = b"".join(_encode_rack(r) for r in java_sorted(racks))
        if len(_partition_racks_bytes) > 65_536:  # pragma: no mutate
            _partition_racks_bytes.clear()
        _partition_racks_bytes[racks] = b  # pragma: no mutate
    return b


def topic_hash_bytes(topic: TopicInfo) -> bytes:
    """The bytes hashed for a topic (docs/protocol.md §13.3)."""
    value = topic.topic_id.int
    msb, lsb = _signed64(value >> 64), _signed64(value & _MASK)
    parts = [
        TOPIC_HASH_MAGIC_BYTE,
        _UUID.pack(msb, lsb),
        _java_string(topic.name),
        _I32.pack(topic.partitions),
    ]
    pack = _I32.pack
    racks = topic.racks
    for p in range(topic.partitions):
        parts.append(pack(p))
        if racks and racks[p]:
            parts.append(_encode_partition_racks(racks[p]))
    return b"".join(parts)


def topic_hash(topic: TopicInfo, function: HashFunction = murmur3_64) -> int:
    return function(topic_hash_bytes(topic))


def group_hash_bytes(hashes_by_topic: dict[str, int]) -> bytes:
    """§13.4: each topic's hash as a LE int64, in topic-name order; names themselves not hashed."""
    return b"".join(_I64.pack(hashes_by_topic[t]) for t in java_sorted(hashes_by_topic))


def group_hash(hashes_by_topic: dict[str, int], function: HashFunction = murmur3_64) -> int:
    """The group metadata hash over its existing subscribed topics; 0 when there are none."""
    if not hashes_by_topic:
        return 0
    return function(group_hash_bytes(hashes_by_topic))


# -- the cache ----------------------------------------------------------------------------------

_NO_READERS: frozenset[str] = frozenset()


class TopicHashCache:
    """topic name -> hash, for the topics some group reads; plus the topic -> groups index."""

    __slots__ = (
        "_catalog",
        "_dropped",
        "_function",
        "_hashes",
        "_readers",
        "algorithm",
        "hits",
        "misses",
        "rebalances",
        "recomputations",
    )

    def __init__(self, catalog: TopicCatalog, algorithm: str = "murmur3") -> None:
        if algorithm not in HASH_FUNCTIONS:
            known = ", ".join(sorted(HASH_FUNCTIONS))
            raise ValueError(f"unknown topic hash {algorithm!r}: use one of {known}")
        # Equivalent under mutation: nothing reads it (kept for whoever inspects the cache).
        self.algorithm = algorithm  # pragma: no mutate
        self._function = HASH_FUNCTIONS[algorithm]
        self._catalog = catalog
        self._hashes: dict[str, int] = {}
        self._readers: dict[str, set[str]] = {}
        self._dropped: set[str] = set()  # invalidated while read: the next compute is a recompute
        self.hits = 0
        self.misses = 0
        self.recomputations = 0
        self.rebalances = 0  # rebalances started because a group's metadata hash changed

    @property
    def entries(self) -> int:
        return len(self._hashes)

    def __len__(self) -> int:
        return len(self._hashes)

    def __contains__(self, name: object) -> bool:
        return name in self._hashes

    # -- hashes -----------------------------------------------------------------------------------

    def topic_hash(self, name: str) -> int:
        """The topic's hash (0 when it does not exist), computed at most once per change."""
        cached = self._hashes.get(name)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        info = self._catalog.get(name)
        value = 0 if info is None else self._function(topic_hash_bytes(info))
        if name in self._dropped:
            # Equivalent under mutation (discarding another name): only group_hash calls this,
            # for topics that exist, so the value is now cached and the name leaves the cache
            # again only by `invalidate` (which adds it back) or by `subscribe` (which drops it).
            self._dropped.discard(name)  # pragma: no mutate
            self.recomputations += 1
        if name in self._readers and info is not None:
            self._hashes[name] = value
        return value

    def group_hash(self, topics: Iterable[str]) -> int:
        """§13.4 over the topics of `topics` that exist in the catalog."""
        catalog = self._catalog
        present = {t: self.topic_hash(t) for t in topics if t in catalog}
        return group_hash(present, self._function)

    def invalidate(self, name: str) -> None:
        """The topic changed or was deleted: forget its hash (recomputed when next needed)."""
        if self._hashes.pop(name, None) is not None:
            self._dropped.add(name)

    # -- the topic -> groups index ----------------------------------------------------------------

    def readers(self, name: str) -> frozenset[str] | set[str]:
        """The ids of the groups whose current generation reads `name` (do not mutate)."""
        return self._readers.get(name, _NO_READERS)

    def subscribe(self, group_id: str, old: frozenset[str], new: frozenset[str]) -> None:
        """Move a group's index entries from `old` to `new` topics; a topic nobody reads any more
        loses its cached hash (seed 002, "Remove a topic hash in the cache")."""
        if old is new:
            return
        readers = self._readers
        for name in old - new:
            groups = readers.get(name)
            if groups is None:
                # Unreachable, so `break` is equivalent: every topic a group is indexed under
                # has a readers entry holding it (this method is the only writer of both).
                continue  # pragma: no mutate
            groups.discard(group_id)
            if not groups:
                del readers[name]
                self._hashes.pop(name, None)
                self._dropped.discard(name)
        for name in new - old:
            groups = readers.get(name)
            if groups is None:
                readers[name] = {group_id}
            else:
                groups.add(group_id)

    def track_generation(self, group: ClassicGroup) -> None:
        """A generation was formed (or loaded): compute its subscribed topics (§10.5), index
        them, and remember the metadata hash the generation was formed with."""
        group.subscribed_topics = group.compute_subscribed_topics()
        topics = group.subscribed_topics or _NO_READERS  # None: not a consumer group / unknown
        self.subscribe(group.group_id, group.hashed_topics, topics)
        group.hashed_topics = topics
        group.metadata_hash = self.group_hash(topics) if topics else 0

    def untrack(self, group: ClassicGroup) -> None:
        """The group is gone: it reads nothing any more."""
        self.subscribe(group.group_id, group.hashed_topics, _NO_READERS)
        group.hashed_topics = _NO_READERS

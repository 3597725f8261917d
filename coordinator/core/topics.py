"""The topic catalog: which topics exist, with their ids, partitions and replica racks.

Standalone mode declares topics at start-up (`--topic orders:12`) and changes them through the
admin APIs (broker.topic_admin); sidecar mode feeds them from the upstream cluster. Either way
a change reaches the core as `GroupCoordinator.topic_changed(name, info | None, now_ms)`, which
updates this catalog, persists the topic (core.records.TopicValue) and re-checks the groups
that read it (KIP-1101, coordinator.core.topichash).

Invariants:
- `TopicInfo.racks` is either empty (racks unknown: every partition hashes as rackless) or has
  exactly one entry per partition, each the racks of that partition's replicas (replicas without
  a rack are left out; duplicates are kept, as Kafka's `partitionRacks` keeps them).
- Identical per-partition rack tuples are interned by the catalog, so 10,000 topics x 32
  partitions with the same three racks share one tuple instead of 320,000.
- Iteration order is creation order.

Pure: no I/O.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

MAX_PARTITIONS = 1_000_000
# Kafka's Topic.validate: legal characters and the 249-character limit (docs/protocol.md §1,
# KafkaApis).
MAX_TOPIC_NAME_LENGTH = 249
_LEGAL_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
# Declared topics get an id derived from their name, so it is the same after a restart.
DECLARED_TOPIC_NAMESPACE = uuid.UUID("6f1c1d3e-2a8b-4a53-9a0e-5b7d4c2e9f10")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    # racks[p] = racks of partition p's replicas; empty tuple when racks are unknown.
    racks: tuple[tuple[str, ...], ...] = ()

    def __post_init__(self) -> None:
        if self.racks and len(self.racks) != self.partitions:
            raise ValueError(
                f"topic {self.name!r}: {len(self.racks)} rack entries for "
                f"{self.partitions} partitions"
            )

    def partition_racks(self, partition: int) -> tuple[str, ...]:
        return self.racks[partition] if self.racks else ()

    def with_partitions(self, count: int) -> TopicInfo:
        """The same topic grown to `count` partitions (the new ones without known racks)."""
        racks = self.racks + ((),) * (count - self.partitions) if self.racks else ()
        return TopicInfo(self.name, self.topic_id, count, racks)


def declared_topic(name: str, partitions: int) -> TopicInfo:
    """A `--topic NAME:PARTITIONS` topic: its id is derived from the name (stable over restarts)."""
    return TopicInfo(name, uuid.uuid5(DECLARED_TOPIC_NAMESPACE, name), partitions)


class TopicCatalog:
    """Name -> TopicInfo. Iteration order is creation order."""

    __slots__ = ("_by_id", "_racks", "_topics")

    def __init__(self, topics: Iterable[TopicInfo] = ()) -> None:
        self._topics: dict[str, TopicInfo] = {}
        self._by_id: dict[uuid.UUID, str] = {}
        self._racks: dict[tuple[str, ...], tuple[str, ...]] = {}
        for t in topics:
            self.put(t)

    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        return self._by_id.get(topic_id)

    def partition_count(self, name: str) -> int | None:
        topic = self._topics.get(name)
        return None if topic is None else topic.partitions

    def has_partition(self, name: str, partition: int) -> bool:
        topic = self._topics.get(name)
        return topic is not None and 0 <= partition < topic.partitions

    def put(self, topic: TopicInfo) -> TopicInfo:
        """Add or replace a topic; returns the stored (rack-interned) value."""
        if topic.racks:
            intern = self._racks.setdefault
            topic = TopicInfo(
                topic.name,
                topic.topic_id,
                topic.partitions,
                tuple(intern(r, r) for r in topic.racks),
            )
        old = self._topics.get(topic.name)
        if old is not None and self._by_id.get(old.topic_id) == old.name:
            del self._by_id[old.topic_id]
        self._topics[topic.name] = topic
        self._by_id[topic.topic_id] = topic.name
        return topic

    def remove(self, name: str) -> TopicInfo | None:
        topic = self._topics.pop(name, None)
        if topic is not None and self._by_id.get(topic.topic_id) == name:
            del self._by_id[topic.topic_id]
        return topic

    def replace_all(self, topics: Iterable[TopicInfo]) -> None:
        """Forget every topic and start again from `topics` (a reload from the log)."""
        self._topics.clear()
        self._by_id.clear()
        self._racks.clear()
        for t in topics:
            self.put(t)

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(self._topics.values())

    def __len__(self) -> int:
        return len(self._topics)

    def __contains__(self, name: object) -> bool:
        return name in self._topics


def topic_name_error(name: str) -> str | None:
    """Kafka's Topic.validate: None when `name` is a legal topic name, else the reason."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return 'Topic name cannot be "." or ".."'
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        return (
            f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters, "
            f"topic name: {name}"
        )
    if not _LEGAL_TOPIC_NAME.fullmatch(name):
        return (
            f'Topic name "{name}" is illegal, it contains a character other than ASCII '
            "alphanumerics, '.', '_' and '-'"
        )
    return None


def parse_topic_spec(spec: str) -> tuple[str, int]:
    """`NAME:PARTITIONS` -> (name, partitions). Raises ValueError with a readable message."""
    name, sep, count = spec.rpartition(":")
    if not sep or not name:
        raise ValueError(f"topic {spec!r}: expected NAME:PARTITIONS")
    # The same names CreateTopics accepts (Kafka's Topic.validate): a declared topic that a client
    # could never have created would be served and stored under a name Kafka refuses.
    if (error := topic_name_error(name)) is not None:
        raise ValueError(f"topic {spec!r}: {error}")
    try:
        partitions = int(count)
    except ValueError:
        raise ValueError(f"topic {spec!r}: partitions must be an integer") from None
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise ValueError(f"topic {spec!r}: partitions must be between 1 and {MAX_PARTITIONS}")
    return name, partitions


def topics_to_look_up(
    catalog: TopicCatalog, requested: Iterable[tuple[str, Iterable[int]]]
) -> tuple[str, ...]:
    """The topics of a request (name, partitions) that `catalog` cannot vouch for: not known,
    or named with a partition beyond the count known (partitions added since). A sidecar asks
    its upstream about these before judging an offset commit (coordinator.sidecar.topic_lookup):
    a Kafka broker knows a topic as soon as it is created, a sidecar only once it has seen it.
    Illegal names are left out (no cluster can have them; the commit is refused as before)."""
    wanted: list[str] = []
    for name, partitions in requested:
        if name in wanted or topic_name_error(name) is not None:
            continue
        count = catalog.partition_count(name)
        if count is None or any(p >= count for p in partitions):
            wanted.append(name)
    return tuple(wanted)

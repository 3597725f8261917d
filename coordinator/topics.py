"""The topic catalog: which topics exist, with their ids and partitions.

Standalone mode declares topics at start-up (`--topic orders:12`); later work adds the admin APIs
and the KIP-1101 topic-hash cache here. Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    # racks[p] = racks of partition p's replicas; empty tuple when racks are unknown.
    racks: tuple[tuple[str, ...], ...] = ()


class TopicCatalog:
    """Name -> TopicInfo. Iteration order is creation order."""

    __slots__ = ("_topics",)

    def __init__(self, topics: tuple[TopicInfo, ...] = ()) -> None:
        self._topics: dict[str, TopicInfo] = {t.name: t for t in topics}

    def get(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def partition_count(self, name: str) -> int | None:
        topic = self._topics.get(name)
        return None if topic is None else topic.partitions

    def has_partition(self, name: str, partition: int) -> bool:
        topic = self._topics.get(name)
        return topic is not None and 0 <= partition < topic.partitions

    def put(self, topic: TopicInfo) -> None:
        self._topics[topic.name] = topic

    def remove(self, name: str) -> TopicInfo | None:
        return self._topics.pop(name, None)

    def __iter__(self) -> Iterator[TopicInfo]:
        return iter(self._topics.values())

    def __len__(self) -> int:
        return len(self._topics)

    def __contains__(self, name: object) -> bool:
        return name in self._topics


def parse_topic_spec(spec: str) -> tuple[str, int]:
    """`NAME:PARTITIONS` -> (name, partitions). Raises ValueError with a readable message."""
    name, sep, count = spec.rpartition(":")
    if not sep or not name:
        raise ValueError(f"topic {spec!r}: expected NAME:PARTITIONS")
    try:
        partitions = int(count)
    except ValueError:
        raise ValueError(f"topic {spec!r}: partitions must be an integer") from None
    if not 1 <= partitions <= 1_000_000:
        raise ValueError(f"topic {spec!r}: partitions must be between 1 and 1000000")
    return name, partitions

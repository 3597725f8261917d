"""Committed offsets and the rules that only need offsets and a group (docs/protocol.md §10).

`OffsetStore` holds the latest OffsetCommitValue per (group, topic, partition) -- exactly what
replaying the OffsetCommit records gives. The request handlers live in `core.coordinator`; this
module has the pure pieces they share: the commit validation table (§10.1), the metadata size rule,
and the retention rules (§10.4).

Invariants: the store never holds an empty per-group or per-topic dict; values are immutable.
"""

from __future__ import annotations

from collections.abc import Iterator

from coordinator.core.group import (
    CONSUMER_PROTOCOL_TYPE,
    STATE_REPLIES,
    Check,
    ClassicGroup,
    GroupState,
)
from coordinator.core.messages import ErrorCode
from coordinator.core.records import OffsetCommitValue

E = ErrorCode
TopicOffsets = dict[str, dict[int, OffsetCommitValue]]


class OffsetStore:
    __slots__ = ("_groups",)

    def __init__(self) -> None:
        self._groups: dict[str, TopicOffsets] = {}

    def get(self, group_id: str, topic: str, partition: int) -> OffsetCommitValue | None:
        topics = self._groups.get(group_id)
        if topics is None:
            return None
        partitions = topics.get(topic)
        return None if partitions is None else partitions.get(partition)

    def put(self, group_id: str, topic: str, partition: int, value: OffsetCommitValue) -> None:
        # Every commit: look up before creating (setdefault would build two empty dicts a call).
        topics = self._groups.get(group_id)
        if topics is None:
            topics = self._groups[group_id] = {}
        partitions = topics.get(topic)
        if partitions is None:
            partitions = topics[topic] = {}
        partitions[partition] = value

    def table(self, group_id: str, topic: str) -> dict[int, OffsetCommitValue]:
        """The partition -> value table of (group_id, topic), created if missing: for loading,
        which fills it directly (the caller must put a value in it: no empty tables)."""
        return self._groups.setdefault(group_id, {}).setdefault(topic, {})

    def delete(self, group_id: str, topic: str, partition: int) -> bool:
        topics = self._groups.get(group_id)
        if topics is None:
            return False
        partitions = topics.get(topic)
        if partitions is None or partitions.pop(partition, None) is None:
            return False
        if not partitions:
            del topics[topic]
            if not topics:
                del self._groups[group_id]
        return True

    def topics(self, group_id: str) -> TopicOffsets:
        """The group's offsets by topic (empty when none). Read only: do not mutate."""
        return self._groups.get(group_id, _NONE)

    def items(self, group_id: str) -> Iterator[tuple[str, int, OffsetCommitValue]]:
        for topic, partitions in self._groups.get(group_id, _NONE).items():
            for partition, value in partitions.items():
                yield topic, partition, value

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def drop_group(self, group_id: str) -> list[tuple[str, int]]:
        topics = self._groups.pop(group_id, _NONE)
        return [(t, p) for t, parts in topics.items() for p in parts]


_NONE: TopicOffsets = {}


def java_length(text: str) -> int:
    """Length in UTF-16 code units, as Java's String.length() (offset.metadata.max.bytes)."""
    if text.isascii():
        return len(text)
    # `/ 2` for `// 2` is an equivalent mutant: the UTF-16 byte count is even, and the float it
    # would give compares with the int limit the same way.
    return len(text.encode("utf-16-le")) // 2  # pragma: no mutate


def validate_commit(
    group: ClassicGroup, generation_id: int, member_id: str, group_instance_id: str | None
) -> ErrorCode | None:
    """ClassicGroup.validateOffsetCommit (§10.1) for a non-transactional commit. None = accept.
    The replies by state are group.STATE_REPLIES'."""
    replies = STATE_REPLIES[group.state]
    # Equivalent under mutation: only Dead has an error at this check, and a live group is never
    # Dead (this coordinator never unloads one); every other state answers None here.
    error = replies[Check.COMMIT]  # pragma: no mutate
    if error is not None:
        return error
    if generation_id < 0 and group.state is GroupState.EMPTY:
        return None  # a simple/admin commit: no member checks
    if generation_id >= 0 or member_id or group_instance_id is not None:
        invalid = group.validate_member(member_id, group_instance_id)
        if invalid is not None:
            return E.fenced_instance_id if invalid else E.unknown_member_id
        if generation_id != group.generation_id:
            return E.illegal_generation
        return replies[Check.COMMIT_MEMBER]
    return replies[Check.COMMIT_SIMPLE]


def expiry_base(group: ClassicGroup) -> tuple[bool, int | None]:
    """Kafka's offsetExpirationCondition (§10.4).

    Returns (expires, base): expires=False means this group's offsets never expire now; base is the
    timestamp to measure from, or None to use each offset's commit timestamp."""
    if group.protocol_type is None:
        return True, None  # simple group: from each commit
    if group.state is GroupState.EMPTY:
        return True, group.state_timestamp_ms  # None (old record) -> commit timestamp
    if (
        group.protocol_type == CONSUMER_PROTOCOL_TYPE
        and group.subscribed_topics is not None
        and group.state is GroupState.STABLE
    ):
        return True, None
    return False, None


def is_expired(
    value: OffsetCommitValue, base: int | None, now_wall_ms: int, retention_ms: int
) -> bool:
    if value.expire_timestamp_ms is not None:
        return now_wall_ms >= value.expire_timestamp_ms
    start = value.commit_timestamp_ms if base is None else base
    return now_wall_ms - start >= retention_ms

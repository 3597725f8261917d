"""OffsetDelete v0 (docs/protocol.md §10.3, KIP-496).

Rules: an empty group id -> INVALID_GROUP_ID; loading -> COORDINATOR_LOAD_IN_PROGRESS; an unknown
group -> GROUP_ID_NOT_FOUND; the group's state (STATE_REPLIES, Check.OFFSET_DELETE: a non-empty
group -> NON_EMPTY_GROUP, unless its protocol type is "consumer"). Per partition: an unknown
topic or partition -> UNKNOWN_TOPIC_OR_PARTITION; a topic the group is subscribed to ->
GROUP_SUBSCRIBED_TO_TOPIC; otherwise its offset is deleted (a tombstone). A KIP-848 consumer group
takes the same per-partition rules in any state (Kafka's ConsumerGroup.validateOffsetDelete checks
nothing), its subscribed topics being its members' names and resolved regexes.
"""

from __future__ import annotations

from collections.abc import Callable

from coordinator.core.effects import Effects
from coordinator.core.events import OffsetsDeleted
from coordinator.core.group import CONSUMER_PROTOCOL_TYPE, Check
from coordinator.core.messages import (
    ErrorCode,
    OffsetDelete,
    OffsetDeleteResult,
    PartitionError,
    TopicErrors,
)
from coordinator.core.records import OffsetCommitKey, Record
from coordinator.core.state import CoreState

E = ErrorCode


def _subscribed_to(state: CoreState, group_id: str) -> Callable[[str], bool] | ErrorCode:
    """Whether the group is subscribed to a topic, or the error that refuses the whole request."""
    if not state.loading and group_id in state.share.groups:
        return E.group_id_not_found  # KIP-932: ShareGroup.validateOffsetDelete (Kafka 4.4)
    consumer_group = state.consumer.groups.get(group_id) if not state.loading else None
    if consumer_group is not None:  # found by comparison with Kafka 4.4 (tests/conformance)
        return consumer_group.subscribed_topic_names().__contains__
    group = state.groups.get(group_id)
    error = state.admin_error(group, Check.OFFSET_DELETE) if group_id else E.invalid_group_id
    if error is E.non_empty_group and group and group.protocol_type == CONSUMER_PROTOCOL_TYPE:
        error = None  # a consumer group's subscribed topics are refused per partition
    if error is not None or group is None:
        return error or E.none
    return group.is_subscribed_to_topic


def handle(state: CoreState, reply_to: int, cmd: OffsetDelete, now_ms: int, fx: Effects) -> None:
    subscribed_to = _subscribed_to(state, cmd.group_id)
    if isinstance(subscribed_to, ErrorCode):
        fx.replies.append((reply_to, OffsetDeleteResult(subscribed_to)))
        return
    gid = cmd.group_id
    deleted = 0
    topics: list[TopicErrors] = []
    for t in cmd.topics:
        subscribed = subscribed_to(t.name)
        parts: list[PartitionError] = []
        for p in t.partitions:
            if not state.topics.has_partition(t.name, p):
                parts.append(PartitionError(p, E.unknown_topic_or_partition))
            elif subscribed:
                parts.append(PartitionError(p, E.group_subscribed_to_topic))
            else:
                if state.offsets.delete(gid, t.name, p):
                    fx.records.append(Record(OffsetCommitKey(gid, t.name, p), None))
                    deleted += 1
                parts.append(PartitionError(p, E.none))
        topics.append(TopicErrors(t.name, tuple(parts)))
    if deleted:
        fx.events.append(OffsetsDeleted(gid, deleted))
    fx.replies.append((reply_to, OffsetDeleteResult(E.none, tuple(topics))))

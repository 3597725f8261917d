"""DescribeShareGroupOffsets (API 90), AlterShareGroupOffsets (API 91) and
DeleteShareGroupOffsets (API 92): a share group's share-partition start offsets (SPSO), as Kafka
4.4 answers them (each rule below was observed on a Kafka 4.4 broker, tests/share).

Rules:
- Describe, per group: loading -> COORDINATOR_LOAD_IN_PROGRESS; any other group id (unknown, a
  classic or a consumer group) answers NONE: with no topics named, no topics; with topics named,
  every named partition with start offset -1, leader epoch 0, lag -1 (unknown topics with a null
  topic id). A share group: its share partitions (those with state, and those assigned to its
  members) with their start offset, -1 where the partition has no state yet.
- Alter: loading -> COORDINATOR_LOAD_IN_PROGRESS; a classic or consumer group ->
  GROUP_ID_NOT_FOUND "Group X is not a share group."; a share group with members ->
  NON_EMPTY_GROUP "The group is not empty."; an unknown id creates the (Empty) share group.
  Per partition: an unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION (unknown topics
  first in the answer, as Kafka lists them), otherwise the partition's state is replaced by a
  new one starting at the given offset (its in-flight records forgotten, the state epoch bumped;
  Kafka takes any offset, even a negative one, and so do we).
- Delete: as Alter for the group, but an unknown group -> GROUP_ID_NOT_FOUND "Group X not
  found."; per topic: unknown -> UNKNOWN_TOPIC_OR_PARTITION, otherwise every share partition of
  the topic loses its state (a tombstone): the next ShareFetch starts it again from the group's
  share.auto.offset.reset, as on Kafka.
- Every change is a record (coordinator.core.share.state_records, type 104; the group's
  ShareGroupMetadata for a new group) replayed at once and durable before the answer leaves.

Lag: Kafka 4.4 (KIP-1226) answers high watermark - start offset - delivery complete count. The
core has no high watermark: it answers -1 and `delivery_complete_count`, which the shell that
knows the upstream's end offsets may turn into the lag.
"""

from __future__ import annotations

import uuid

from coordinator.core.effects import Effects
from coordinator.core.messages import ErrorCode
from coordinator.core.records import Record
from coordinator.core.share.admin_messages import (
    AlteredSharePartition,
    AlteredShareTopic,
    AlterShareGroupOffsets,
    AlterShareGroupOffsetsResult,
    DeletedShareTopic,
    DeleteShareGroupOffsets,
    DeleteShareGroupOffsetsResult,
    DescribedShareOffsetGroup,
    DescribedShareOffsetTopic,
    DescribedSharePartition,
    DescribeShareGroupOffsets,
    DescribeShareGroupOffsetsResult,
    ShareOffsetsGroupRequest,
)
from coordinator.core.share.messages import ShareRecord
from coordinator.core.share.persisted import ShareSnapshot
from coordinator.core.share.records import ShareGroupMetadataKey, ShareGroupMetadataValue
from coordinator.core.share.state_records import SharePartitionStateKey, SharePartitionStateValue
from coordinator.core.state import CoreState

E = ErrorCode
_UNKNOWN_PARTITION = "This server does not host this topic-partition."
_NOT_EMPTY = "The group is not empty."


def _other_type(state: CoreState, group_id: str) -> bool:
    return group_id in state.groups or group_id in state.consumer.groups


# -- DescribeShareGroupOffsets ---------------------------------------------------------------------


def describe(
    state: CoreState, reply_to: int, cmd: DescribeShareGroupOffsets, now_ms: int, fx: Effects
) -> None:
    groups = tuple(_describe_group(state, g) for g in cmd.groups)
    fx.replies.append((reply_to, DescribeShareGroupOffsetsResult(groups)))


def _describe_group(state: CoreState, req: ShareOffsetsGroupRequest) -> DescribedShareOffsetGroup:
    gid = req.group_id
    if state.loading:
        return DescribedShareOffsetGroup(gid, (), E.coordinator_load_in_progress)
    wanted = req.topics if req.topics is not None else _share_partitions(state, gid)
    topics = []
    for name, partitions in wanted:
        info = state.topics.get(name)
        topic_id = None if info is None else info.topic_id
        topics.append(
            DescribedShareOffsetTopic(
                name,
                topic_id,
                # Kafka answers the partitions asked for in ascending order, once each.
                tuple(_described(state, gid, topic_id, p) for p in sorted(set(partitions))),
            )
        )
    return DescribedShareOffsetGroup(gid, tuple(topics))


def _described(
    state: CoreState, gid: str, topic_id: uuid.UUID | None, partition: int
) -> DescribedSharePartition:
    part = None
    if topic_id is not None and not _other_type(state, gid):
        part = state.share.partitions.get((gid, topic_id, partition))
    if part is None:
        return DescribedSharePartition(partition)
    return DescribedSharePartition(
        partition,
        start_offset=part.start_offset,
        leader_epoch=part.leader_epoch,
        delivery_complete_count=part.delivery_complete_count(),
    )


def _share_partitions(state: CoreState, gid: str) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The group's share partitions by topic name: those with state and those assigned to a
    member (Kafka lists the partitions it initialized for the group), in name order."""
    found: dict[str, set[int]] = {}
    for g, topic_id, partition in state.share.partitions:
        name = state.topics.name_of(topic_id)
        if g == gid and name is not None:
            found.setdefault(name, set()).add(partition)
    group = state.share.groups.get(gid)
    for member in group.members.values() if group else ():
        for topic_id, partitions in member.assigned.items():
            name = state.topics.name_of(topic_id)
            if name is not None:
                found.setdefault(name, set()).update(partitions)
    return tuple((name, tuple(sorted(ps))) for name, ps in sorted(found.items()))


# -- AlterShareGroupOffsets ------------------------------------------------------------------------


def _group_error(state: CoreState, gid: str, create: bool) -> tuple[ErrorCode, str | None] | None:
    """The whole request's error for `gid`, or None to go on."""
    if state.loading:
        return E.coordinator_load_in_progress, None
    if not gid:
        return E.invalid_group_id, None
    if _other_type(state, gid):
        return E.group_id_not_found, f"Group {gid} is not a share group."
    group = state.share.groups.get(gid)
    if group is None and not create:
        return E.group_id_not_found, f"Group {gid} not found."
    if group is not None and group.members:
        return E.non_empty_group, _NOT_EMPTY
    return None


def alter(
    state: CoreState, reply_to: int, cmd: AlterShareGroupOffsets, now_ms: int, fx: Effects
) -> None:
    gid = cmd.group_id
    refused = _group_error(state, gid, create=True)
    if refused is not None:
        fx.replies.append((reply_to, AlterShareGroupOffsetsResult(*refused)))
        return
    if gid not in state.share.groups:  # Kafka creates the share group (Empty, epoch 0)
        _write(state, fx, Record(ShareGroupMetadataKey(gid), ShareGroupMetadataValue(0, 0)))
    unknown: list[AlteredShareTopic] = []
    done: list[AlteredShareTopic] = []
    for name, partitions in cmd.topics:
        info = state.topics.get(name)
        if info is None:
            refused_all = tuple(
                AlteredSharePartition(p, E.unknown_topic_or_partition, _UNKNOWN_PARTITION)
                for p, _ in partitions
            )
            unknown.append(AlteredShareTopic(name, None, refused_all))
            continue
        answers = []
        for partition, offset in partitions:
            if state.topics.has_partition(name, partition):
                _reset(state, fx, (gid, info.topic_id, partition), offset)
                answers.append(AlteredSharePartition(partition))
            else:
                answers.append(
                    AlteredSharePartition(
                        partition, E.unknown_topic_or_partition, _UNKNOWN_PARTITION
                    )
                )
        done.append(AlteredShareTopic(name, info.topic_id, tuple(answers)))
    fx.replies.append((reply_to, AlterShareGroupOffsetsResult(topics=(*unknown, *done))))


def _reset(state: CoreState, fx: Effects, key: tuple[str, uuid.UUID, int], offset: int) -> None:
    """A new state for the partition from `offset`: Kafka's InitializeShareGroupState with the
    state epoch bumped, which forgets every in-flight record."""
    old = state.share.partitions.get(key)
    epoch = 0 if old is None else old.state_epoch + 1
    snapshot_epoch = 0 if old is None else old.snapshot_epoch + 1
    leader_epoch = 0 if old is None else old.leader_epoch
    snapshot = ShareSnapshot(snapshot_epoch, epoch, leader_epoch, offset, 0, ())
    _write(state, fx, Record(SharePartitionStateKey(*key), SharePartitionStateValue(snapshot)))


# -- DeleteShareGroupOffsets -----------------------------------------------------------------------


def delete(
    state: CoreState, reply_to: int, cmd: DeleteShareGroupOffsets, now_ms: int, fx: Effects
) -> None:
    gid = cmd.group_id
    refused = _group_error(state, gid, create=False)
    if refused is not None:
        fx.replies.append((reply_to, DeleteShareGroupOffsetsResult(*refused)))
        return
    results = []
    for name in cmd.topics:
        info = state.topics.get(name)
        if info is None:
            results.append(
                DeletedShareTopic(name, None, E.unknown_topic_or_partition, _UNKNOWN_PARTITION)
            )
            continue
        drop_partitions(state, fx, gid, info.topic_id)
        results.append(DeletedShareTopic(name, info.topic_id))
    fx.replies.append((reply_to, DeleteShareGroupOffsetsResult(topics=tuple(results))))


def drop_partitions(
    state: CoreState, fx: Effects, gid: str, topic_id: uuid.UUID | None = None
) -> None:
    """Tombstones for the group's share partitions (of one topic, or all): DeleteShareGroupOffsets
    and DeleteGroups."""
    keys = sorted(
        (k for k in state.share.partitions if k[0] == gid and topic_id in (None, k[1])),
        key=lambda k: (k[1].bytes, k[2]),
    )
    for key in keys:
        _write(state, fx, Record(SharePartitionStateKey(*key), None))


def _write(state: CoreState, fx: Effects, record: Record) -> None:
    """Append the record and apply it, as replay will (coordinator.core.loading)."""
    fx.records.append(record)
    key, value = record.key, record.value
    if isinstance(key, SharePartitionStateKey):
        assert value is None or isinstance(value, SharePartitionStateValue)
        state.share.replay_partition(key, value)
    else:
        assert isinstance(key, ShareGroupMetadataKey)
        assert value is None or isinstance(value, ShareGroupMetadataValue)
        state.share.replay(ShareRecord(key, value))

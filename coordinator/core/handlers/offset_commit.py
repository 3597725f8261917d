"""OffsetCommit v2-v9 (docs/protocol.md §10.1), the second-hottest request.

Rules: an unknown topic or partition -> UNKNOWN_TOPIC_OR_PARTITION at the broker level (Kafka's
KafkaApis), never reaching the group; the others get the group's one validation error
(core.offsets.validate_commit; v9+ an unknown group with a generation -> GROUP_ID_NOT_FOUND,
older ILLEGAL_GENERATION; loading -> COORDINATOR_LOAD_IN_PROGRESS), metadata over
offset.metadata.max.bytes (in Java chars) -> OFFSET_METADATA_TOO_LARGE, or are committed: stored
at once, durable before the reply leaves. retention_time_ms (v2-v4) sets an explicit expiry. A
commit from a member of a Stable or PreparingRebalance group renews its session (Kafka's
heartbeat-on-commit). A simple group is created with its first offset.
A KIP-848 consumer group's commit is checked as Kafka 4.x's ConsumerGroup.validateOffsetCommit:
a negative epoch commits to an Empty group (admin, simple consumer); otherwise an unknown member
-> UNKNOWN_MEMBER_ID, a request below v9 -> UNSUPPORTED_VERSION, an epoch other than the
member's -> STALE_MEMBER_EPOCH; a classic member of the consumer group (issue 23 item 6) commits
with any version and its generation, ILLEGAL_GENERATION when that is not its member epoch.
"""

from __future__ import annotations

from coordinator.core.consumer.model import ConsumerGroup
from coordinator.core.effects import Effects
from coordinator.core.events import GroupCreated, OffsetsCommitted
from coordinator.core.group import ClassicGroup, GroupState
from coordinator.core.messages import (
    ErrorCode,
    OffsetCommit,
    OffsetCommitResult,
    PartitionError,
    TopicErrors,
)
from coordinator.core.offsets import java_length, validate_commit
from coordinator.core.records import OffsetCommitKey, OffsetCommitValue, Record
from coordinator.core.state import CoreState

E = ErrorCode
_COMMITTED = tuple(PartitionError(p, ErrorCode.none) for p in range(1024))
_RENEWING = (GroupState.STABLE, GroupState.PREPARING_REBALANCE)


def _committed(partition: int) -> PartitionError:
    """PartitionError(partition, NONE), shared for the usual partition numbers: immutable, and
    one less object a committed partition."""
    # Moving the table's bounds is an equivalent mutant (a fresh PartitionError is equal to the
    # shared one); tests/core/test_pin_commit.py pins the answers on both sides of 1024.
    if 0 <= partition < 1024:  # pragma: no mutate
        return _COMMITTED[partition]
    return PartitionError(partition, E.none)


def handle(state: CoreState, reply_to: int, cmd: OffsetCommit, now_ms: int, fx: Effects) -> None:
    """One pass over the partitions; the group is validated once, and only if some partition
    exists."""
    has = state.topics.has_partition
    gid = cmd.group_id
    group = state.groups.get(gid)
    # Read only once `checked` is set: other initial values are equivalent mutants.
    error: ErrorCode | None = None  # pragma: no mutate
    checked = False  # pragma: no mutate (None is as false)
    wall = state.wall(now_ms)
    expire_at = wall + cmd.retention_time_ms if cmd.retention_time_ms != -1 else None
    max_len = state.config.offset_metadata_max_bytes
    put = state.offsets.put
    records = fx.records
    committed = 0
    topics: list[TopicErrors] = []
    for t in cmd.topics:
        name = t.name
        results: list[PartitionError] = []
        for p in t.partitions:
            partition = p.partition
            if not has(name, partition):
                results.append(PartitionError(partition, E.unknown_topic_or_partition))
                continue
            if not checked:
                checked = True
                error = _error(state, group, cmd)
            if error is not None:
                results.append(PartitionError(partition, error))
                continue
            metadata = p.metadata or ""
            if java_length(metadata) > max_len:
                results.append(PartitionError(partition, E.offset_metadata_too_large))
                continue
            value = OffsetCommitValue(p.offset, p.leader_epoch, metadata, wall, expire_at)
            put(gid, name, partition, value)
            records.append(Record(OffsetCommitKey(gid, name, partition), value))
            committed += 1
            results.append(_committed(partition))
        topics.append(TopicErrors(name, tuple(results)))
    fx.replies.append((reply_to, OffsetCommitResult(tuple(topics))))
    if not checked or error is not None:
        return
    if group is None:
        if not committed or gid in state.consumer.groups:
            # Kafka keeps the new simple group in memory even when nothing was written; we
            # create it only with its first offset so that replaying the log rebuilds it.
            return
        group = ClassicGroup(gid, None)
        state.groups[gid] = group
        fx.events.append(GroupCreated(gid))
    elif group.state in _RENEWING:
        member = group.members.get(cmd.member_id)
        if member is not None:
            state.timers.schedule_session(group, member, member.session_timeout_ms, now_ms)
    if committed:
        fx.events.append(OffsetsCommitted(gid, committed))


def _error(state: CoreState, group: ClassicGroup | None, cmd: OffsetCommit) -> ErrorCode | None:
    """The coordinator-level error of a commit to `group` (§10.1); None = accept."""
    if state.loading:
        return E.coordinator_load_in_progress
    if group is None and cmd.group_id in state.share.groups:
        return E.group_id_not_found  # KIP-932: ShareGroup.validateOffsetCommit (Kafka 4.4)
    if group is None:
        consumer_group = state.consumer.groups.get(cmd.group_id)
        if consumer_group is not None:
            return _consumer_error(consumer_group, cmd)
        if cmd.generation_id >= 0:
            return E.group_id_not_found if cmd.api_version >= 9 else E.illegal_generation
        return None
    return validate_commit(group, cmd.generation_id, cmd.member_id, cmd.group_instance_id)


def _consumer_error(group: ConsumerGroup, cmd: OffsetCommit) -> ErrorCode | None:
    """Kafka 4.x's ConsumerGroup.validateOffsetCommit (non-transactional)."""
    if cmd.generation_id < 0 and not group.members:
        return None
    member = group.members.get(cmd.member_id)
    if member is None:
        return E.unknown_member_id
    classic = member.classic is not None
    if cmd.api_version < 9 and not classic:  # "OffsetCommit version 9 or above must be used
        return E.unsupported_version  # by members using the modern group protocol"
    if cmd.generation_id != member.member_epoch:
        return E.illegal_generation if classic else E.stale_member_epoch
    return None

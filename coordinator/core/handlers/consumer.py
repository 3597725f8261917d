"""ConsumerGroupHeartbeat (API 68) and ConsumerGroupDescribe (API 69): the KIP-848 consumer
groups of coordinator.core.consumer inside the core, beside the classic groups (issue 23).

Rules:
- One namespace of group ids: an id is a classic group (`state.groups`) or a consumer group
  (`state.consumer.groups`), never both; committed offsets belong to the id whatever its type.
- A heartbeat that joins an id held by an Empty classic group (a simple group's offsets, a
  group whose members all left) deletes the classic group (its GroupMetadata tombstone) and
  creates the consumer group; the offsets stay (Kafka 4.x, GroupMetadataManager
  `getOrMaybeCreatePersistedConsumerGroup`). A non-empty classic group refuses it with
  GROUP_ID_NOT_FOUND: the online upgrade (issue 23 item 6) is not implemented, and Kafka with
  group.consumer.migration.policy=disabled answers the same.
- While the log loads every request answers COORDINATOR_LOAD_IN_PROGRESS.
- The consumer coordinator's records are the core's records (the same keys and values), so the
  runtime persists them before the reply leaves, and loading replays them (core.loading).
- ConsumerGroupDescribe: per group; an unknown id, or a classic group's, is GROUP_ID_NOT_FOUND
  (Kafka: "Group X is not a consumer group.").
- The consumer coordinator's own events (epoch bumps, target assignments, removals) stay out of
  Effects.events, whose sinks (metrics, history) know the classic events only; the status page
  and the metrics read the consumer groups themselves (GroupCoordinator.consumer).
"""

from __future__ import annotations

from coordinator.core.consumer.messages import (
    ConsumerGroupDescribe,
    ConsumerGroupDescribeResult,
    ConsumerGroupHeartbeat,
    DescribedConsumerGroup,
    HeartbeatResponse,
)
from coordinator.core.effects import Effects
from coordinator.core.events import GroupDeleted
from coordinator.core.group import GroupState
from coordinator.core.messages import ErrorCode
from coordinator.core.records import GroupMetadataKey, OffsetCommitKey, Record
from coordinator.core.state import CoreState

E = ErrorCode


def heartbeat(
    state: CoreState, reply_to: int, cmd: ConsumerGroupHeartbeat, now_ms: int, fx: Effects
) -> None:
    if state.loading:
        fx.replies.append((reply_to, HeartbeatResponse(E.coordinator_load_in_progress)))
        return
    classic = state.groups.get(cmd.group_id)
    if classic is not None and classic.state is not GroupState.EMPTY:
        message = (
            f"Cannot upgrade classic group {cmd.group_id} to consumer group: the online upgrade "
            "is not supported."
        )
        fx.replies.append((reply_to, HeartbeatResponse(E.group_id_not_found, message)))
        return
    result = state.consumer.heartbeat(cmd, now_ms)
    response = result.response
    assert response is not None
    if classic is not None and result.records:
        # The empty classic group gives way to the consumer group (its offsets stay).
        fx.records.append(Record(GroupMetadataKey(cmd.group_id), None))
        del state.groups[cmd.group_id]
        state.topic_hashes.untrack(classic)
        fx.events.append(GroupDeleted(cmd.group_id))
    fx.records.extend(Record(r.key, r.value) for r in result.records)
    fx.replies.append((reply_to, response))


def describe(
    state: CoreState, reply_to: int, cmd: ConsumerGroupDescribe, now_ms: int, fx: Effects
) -> None:
    out: list[DescribedConsumerGroup] = []
    for gid in cmd.group_ids:
        if state.loading:
            out.append(DescribedConsumerGroup(gid, E.coordinator_load_in_progress))
            continue
        if not gid:
            out.append(DescribedConsumerGroup(gid, E.invalid_group_id))
            continue
        description = state.consumer.describe(gid)
        if description is None:
            message = (
                f"Group {gid} is not a consumer group."
                if gid in state.groups
                else f"Group {gid} not found."
            )
            out.append(DescribedConsumerGroup(gid, E.group_id_not_found, message))
            continue
        ids = {
            tp.topic_id for m in description.members for tp in (*m.assignment, *m.target_assignment)
        }
        names = ((i, state.topics.name_of(i)) for i in sorted(ids))
        known = tuple((i, n) for i, n in names if n is not None)
        out.append(DescribedConsumerGroup(gid, E.none, None, description, known))
    fx.replies.append((reply_to, ConsumerGroupDescribeResult(tuple(out))))


def expire(state: CoreState, now_ms: int, fx: Effects) -> None:
    """The consumer groups' session and rebalance timeouts (none fire while loading)."""
    if state.loading:
        return
    result = state.consumer.expire(now_ms)
    fx.records.extend(Record(r.key, r.value) for r in result.records)


def delete(state: CoreState, gid: str, fx: Effects) -> ErrorCode:
    """DeleteGroups of a consumer group: an Empty one's offsets and records (tombstones);
    NON_EMPTY_GROUP otherwise (Kafka's ConsumerGroup.validateDeleteGroup)."""
    error, records = state.consumer.delete_group(gid)
    if error is not E.none:
        return error
    for topic, partition in state.offsets.drop_group(gid):
        fx.records.append(Record(OffsetCommitKey(gid, topic, partition), None))
    for pending in state.txn_pending.drop_group(gid):
        fx.records.append(Record(pending, None))
    fx.records.extend(Record(r.key, r.value) for r in records)
    fx.events.append(GroupDeleted(gid))
    return E.none

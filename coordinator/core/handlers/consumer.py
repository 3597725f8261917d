"""ConsumerGroupHeartbeat (API 68) and ConsumerGroupDescribe (API 69): the KIP-848 consumer
groups of coordinator.core.consumer inside the core, beside the classic groups (issue 23).

Rules:
- One namespace of group ids: an id is a classic group (`state.groups`) or a consumer group
  (`state.consumer.groups`), never both; committed offsets belong to the id whatever its type.
- A heartbeat that joins an id held by an Empty classic group (a simple group's offsets, a
  group whose members all left) deletes the classic group (its GroupMetadata tombstone) and
  creates the consumer group; the offsets stay (Kafka 4.x, GroupMetadataManager
  `getOrMaybeCreatePersistedConsumerGroup`). A non-empty classic group is upgraded to a consumer
  group when eligible (core.handlers.migration, issue 23 item 6), else refused with
  GROUP_ID_NOT_FOUND; a member leaving (epoch -1) or fenced so that only classic members remain
  downgrades the group back to a classic one.
- While the log loads every request answers COORDINATOR_LOAD_IN_PROGRESS.
- The consumer coordinator's records are the core's records (the same keys and values), so the
  runtime persists them before the reply leaves, and loading replays them (core.loading).
- ConsumerGroupDescribe: per group; an unknown id, or a classic group's, is GROUP_ID_NOT_FOUND
  (Kafka: "Group X is not a consumer group.").
- The consumer coordinator's events reach Effects.events as the classic groups' events, so every
  sink (metrics, the status page's recent rebalances, the history log and the audit) sees a
  consumer group's rebalances: a member added -> MemberJoined, removed -> MemberLeft (expired,
  fenced when a static member's new id replaced it, rebalance_timeout), a group epoch bump ->
  RebalanceStarted with its cause and trigger, the group Stable (or Empty) again ->
  RebalanceCompleted (group_type "consumer": the group epoch as the generation, the server
  assignor as the protocol, join phase = until the target assignment was computed), and each
  member reaching its target -> MemberReconciled. Target assignments themselves are not events.
"""

from __future__ import annotations

from coordinator.core.consumer import messages as cm
from coordinator.core.consumer.messages import (
    ConsumerEvent,
    ConsumerGroupDescribe,
    ConsumerGroupDescribeResult,
    ConsumerGroupHeartbeat,
    DescribedConsumerGroup,
    HeartbeatResponse,
)
from coordinator.core.consumer.model import LEAVE_GROUP_MEMBER_EPOCH, MemberState
from coordinator.core.consumer.records import ConsumerGroupRecord
from coordinator.core.effects import AnyCommand, Effects
from coordinator.core.events import (
    GroupCreated,
    GroupDeleted,
    LeaveReason,
    MemberJoined,
    MemberLeft,
    MemberReconciled,
    RebalanceCause,
    RebalanceCompleted,
    RebalanceStarted,
    RebalanceTrigger,
)
from coordinator.core.group import GroupState
from coordinator.core.handlers import migration
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
    if cmd.group_id in state.share.groups:  # KIP-932: a share group's id
        message = f"Group {cmd.group_id} is not a consumer group."
        fx.replies.append((reply_to, HeartbeatResponse(E.group_id_not_found, message)))
        return
    classic = state.groups.get(cmd.group_id)
    upgraded: list[ConsumerGroupRecord] | None = None
    if classic is not None and classic.state is not GroupState.EMPTY:
        # The online upgrade (Kafka's getOrMaybeCreateConsumerGroup): only a joining member.
        refused = (
            migration.upgrade(state, classic)
            if cmd.member_epoch == 0
            else f"Group {cmd.group_id} is not a consumer group."
        )
        if isinstance(refused, str):
            fx.replies.append((reply_to, HeartbeatResponse(E.group_id_not_found, refused)))
            return
        upgraded = refused
        migration.apply_upgrade(state, upgraded)
    new = cmd.group_id not in state.consumer.groups
    result = state.consumer.heartbeat(cmd, now_ms)
    response = result.response
    assert response is not None
    if upgraded is not None:
        assert classic is not None
        if not result.records:
            migration.undo_upgrade(state, cmd.group_id)
        else:
            migration.finish_upgrade(state, classic, upgraded, now_ms, fx)
    elif classic is not None and result.records:
        # The empty classic group gives way to the consumer group (its offsets stay).
        fx.records.append(Record(GroupMetadataKey(cmd.group_id), None))
        del state.groups[cmd.group_id]
        state.topic_hashes.untrack(classic)
        fx.events.append(GroupDeleted(cmd.group_id))
    if new and result.records:
        fx.events.append(GroupCreated(cmd.group_id))
    fx.records.extend(Record(r.key, r.value) for r in result.records)
    fx.events.extend(_event(e, now_ms) for e in result.events if type(e) in _TRANSLATED)
    if cmd.member_epoch == LEAVE_GROUP_MEMBER_EPOCH and result.records:
        migration.maybe_downgrade(state, cmd.group_id, now_ms, fx)
    fx.replies.append((reply_to, response))


def release_first(
    state: CoreState, commands: list[tuple[int, AnyCommand]]
) -> list[tuple[int, AnyCommand]]:
    """The order in which to apply one batch of requests (`GroupCoordinator.handle_many`: what
    one pass of the server's loop read, at one instant, at most one request per connection):
    the ConsumerGroupHeartbeats that may free partitions -- a member revoking (its answer may
    report the revocation done) or leaving -- before the rest, otherwise in arrival order.

    Requests of different connections read in the same pass are concurrent: any order is one
    Kafka could have seen. This one lets a member waiting for a partition (a newcomer whose
    target is still held, UNRELEASED_PARTITIONS) get it in this batch when its holder's
    revocation arrived in the same one, instead of one heartbeat interval later. Nothing else
    changes: a partition is still given only once its holder released it (reconcile)."""
    groups = state.consumer.groups
    first: list[tuple[int, AnyCommand]] = []
    rest: list[tuple[int, AnyCommand]] = []
    for entry in commands:
        cmd = entry[1]
        if type(cmd) is ConsumerGroupHeartbeat:
            if cmd.member_epoch == LEAVE_GROUP_MEMBER_EPOCH:
                first.append(entry)
                continue
            group = groups.get(cmd.group_id)
            member = None if group is None else group.members.get(cmd.member_id)
            if member is not None and member.state is MemberState.UNREVOKED_PARTITIONS:
                first.append(entry)
                continue
        rest.append(entry)
    return first + rest if first and rest else commands


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
    fx.events.extend(_event(e, now_ms) for e in result.events if type(e) in _TRANSLATED)
    for gid in dict.fromkeys(r.key.group_id for r in result.records):
        migration.maybe_downgrade(state, gid, now_ms, fx)


_LEAVE_REASONS = {
    "left": LeaveReason.LEFT,
    "session_expired": LeaveReason.EXPIRED,
    "static_replaced": LeaveReason.FENCED,
    "rebalance_timeout": LeaveReason.REBALANCE_TIMEOUT,
}
_TRANSLATED = frozenset(
    {cm.MemberAdded, cm.MemberRemoved, cm.GroupEpochBumped, cm.MemberReconciled,
     cm.RebalanceSettled}
)  # fmt: skip


def _trigger(e: cm.GroupEpochBumped) -> RebalanceTrigger:
    return RebalanceTrigger(e.member_id, e.instance_id, e.client_id, e.client_host, e.topics)


def _event(
    e: ConsumerEvent, now_ms: int
) -> MemberJoined | MemberLeft | RebalanceStarted | RebalanceCompleted | MemberReconciled:
    """A consumer-group event as the core's (see the module docstring); `_TRANSLATED` only."""
    match e:
        case cm.MemberAdded():
            return MemberJoined(e.group_id, e.member_id, e.instance_id, e.client_id, e.client_host)
        case cm.MemberRemoved():
            reason = _LEAVE_REASONS.get(e.reason, LeaveReason.LEFT)
            return MemberLeft(e.group_id, e.member_id, e.instance_id, reason, e.client_id,
                              e.client_host)  # fmt: skip
        case cm.GroupEpochBumped():
            cause = RebalanceCause(e.cause)
            return RebalanceStarted(e.group_id, cause, e.member_id, now_ms, _trigger(e))
        case cm.MemberReconciled():
            return MemberReconciled(e.group_id, e.member_id, e.member_epoch, e.reconcile_ms)
        case cm.RebalanceSettled():
            return RebalanceCompleted(
                e.group_id, e.group_epoch, e.assignor, None, e.members,
                RebalanceCause(e.bump.cause), e.started_ms, e.assigned_ms, e.now_ms,
                _trigger(e.bump), "consumer",
            )  # fmt: skip
        case _:
            raise AssertionError(f"not a translated event: {e!r}")


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

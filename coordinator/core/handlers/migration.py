"""The online upgrade and downgrade between classic and consumer groups (issue 23 item 6): Kafka
4.x's GroupMetadataManager `validateOnlineUpgrade` / `convertToConsumerGroup` and
`validateOnlineDowngradeWithFencedMember` / `convertToClassicGroup`, under
group.consumer.migration.policy (`CoordinatorConfig.consumer_migration_policy`, "bidirectional"
by default as in Kafka 4.0+).

Upgrade: a ConsumerGroupHeartbeat joining (epoch 0) a non-empty classic group of protocol type
"consumer", no larger than the consumer groups' maximum, whose every member's subscription and
assignment parse, turns it into a consumer group: every classic member becomes a member with its
ClassicMemberMetadata, epochs = the generation, current and target assignment = its classic
assignment (ConsumerGroup.fromClassicGroup), all Stable. The records go out together with the
heartbeat's own: the classic group's tombstone, then Kafka's createConsumerGroupRecords (every
subscription, the group epoch, every target, the assignment epoch, every current assignment).
Parked JoinGroups/SyncGroups are answered REBALANCE_IN_PROGRESS; the members then rejoin as
classic members of the consumer group (coordinator.core.consumer.classic) because the joining
member bumped the group epoch. A refused heartbeat leaves the classic group untouched.

Downgrade: when a member is fenced (left with epoch -1, session or rebalance timeout) and only
classic members remain, the group becomes a classic group again: Stable at generation = the group
epoch, protocol type "consumer", the protocol every member lists that most prefer, each member's
target assignment as its assignment (serialized at the version of its subscription), then a
rebalance at once (ClassicGroup.fromConsumerGroup + prepareRebalance). Records: the consumer
group's tombstones, then the classic GroupMetadata.

Where we differ from Kafka on purpose:
- The downgrade is decided after the fence, not instead of it: the leaving member's tombstones
  and the epoch bump are written first; the classic generation is the epoch before that bump,
  Kafka's. The state after replay is the same. We downgrade whenever a fence leaves only
  classic members (Kafka: only when the fenced member was the last consumer-protocol one); the
  two differ only for a group whose earlier downgrade the policy or the size refused. A static
  member replaced by a classic one whose JoinGroup leaves only classic members downgrades at
  once, as Kafka's validateOnlineDowngradeWithReplacedMemberId does, without a rebalance.
- Empty assignment bytes (a member that joined but was never synced) are an empty assignment,
  not a malformed one; assignments that overlap refuse the upgrade (Kafka would replay them into
  a broken group).
- A classic group whose protocol is not chosen yet (its first rebalance) is read with each
  member's first protocol.

Pure: no I/O.
"""

from __future__ import annotations

from coordinator.core.consumer.classic import (
    CONSUMER_PROTOCOL_TYPE,
    assignment_bytes,
    partition_map,
)
from coordinator.core.consumer.model import EMPTY_PARTITIONS, ConsumerGroupMember, MemberState
from coordinator.core.consumer.record_helpers import (
    current_assignment_record,
    remove_member_records,
    subscription_record,
    target_record,
)
from coordinator.core.consumer.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupMetadataKey,
    ConsumerGroupMetadataValue,
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from coordinator.core.consumer.timers import TimerKind
from coordinator.core.effects import Effects
from coordinator.core.events import (
    GroupCreated,
    GroupDeleted,
    MemberJoined,
    RebalanceCause,
)
from coordinator.core.group import ClassicGroup, GroupState, Member
from coordinator.core.messages import (
    ErrorCode,
    JoinGroupResult,
    Protocol,
    SyncGroupResult,
)
from coordinator.core.rebalance import group_record, prepare_rebalance
from coordinator.core.records import GroupMetadataKey, Record
from coordinator.core.state import CoreState
from protocol import consumer as consumer_protocol

__all__ = ["apply_upgrade", "finish_upgrade", "maybe_downgrade", "undo_upgrade", "upgrade"]

E = ErrorCode


def _allows(state: CoreState, direction: str) -> bool:
    return state.config.consumer_migration_policy in ("bidirectional", direction)


# -- upgrade -------------------------------------------------------------------------------------


def upgrade(state: CoreState, classic: ClassicGroup) -> list[ConsumerGroupRecord] | str:
    """Kafka's validateOnlineUpgrade + ConsumerGroup.fromClassicGroup: the consumer group's
    records (not applied), or why the upgrade is refused (GROUP_ID_NOT_FOUND's message)."""
    gid = classic.group_id
    refused = f"Cannot upgrade classic group {gid} to consumer group"
    if not _allows(state, "upgrade"):
        return f"{refused} because the online upgrade is disabled."
    if classic.protocol_type != CONSUMER_PROTOCOL_TYPE:
        return f"{refused} because the group does not use the consumer embedded protocol."
    if len(classic.members) > state.consumer.config.max_size:
        return f"{refused} because the group size exceeds the consumer group maximum size."
    malformed = f"{refused} because the embedded consumer protocol is malformed."
    epoch = classic.generation_id
    members: list[ConsumerGroupMember] = []
    seen: set[tuple[object, int]] = set()
    for m in classic.members.values():
        name = classic.protocol_name
        metadata = m.metadata(name) if name is not None else m.protocols[0].metadata
        subscription = consumer_protocol.subscription(metadata)
        assigned = consumer_protocol.assignment_partitions(m.assignment)
        if subscription is None or assigned is None:
            return malformed
        partitions = partition_map(state.topics, assigned)
        held = {(tid, p) for tid, ps in partitions.items() for p in ps}
        if held & seen:
            return malformed
        seen |= held
        members.append(
            ConsumerGroupMember(
                m.member_id,
                member_epoch=epoch,
                previous_member_epoch=epoch,
                state=MemberState.STABLE,
                instance_id=m.group_instance_id,
                rack_id=subscription.rack_id,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=frozenset(subscription.topics),
                assigned_partitions=partitions,
                classic=ClassicMemberMetadata(
                    m.session_timeout_ms,
                    tuple(ClassicProtocol(p.name, p.metadata) for p in m.protocols),
                ),
            )
        )
    # Kafka's createConsumerGroupRecords, in its order.
    records = [subscription_record(gid, m) for m in members]
    records.append(
        ConsumerGroupRecord(ConsumerGroupMetadataKey(gid), ConsumerGroupMetadataValue(epoch))
    )
    records.extend(target_record(gid, m.member_id, m.assigned_partitions) for m in members)
    records.append(
        ConsumerGroupRecord(
            ConsumerGroupTargetAssignmentMetadataKey(gid),
            ConsumerGroupTargetAssignmentMetadataValue(epoch),
        )
    )
    records.extend(current_assignment_record(gid, m) for m in members)
    return records


def apply_upgrade(state: CoreState, records: list[ConsumerGroupRecord]) -> None:
    """Replay the consumer group's records (before the heartbeat that joins it runs)."""
    for record in records:
        state.consumer.replay(record)


def undo_upgrade(state: CoreState, group_id: str) -> None:
    """The heartbeat was refused (no record of its own): the classic group stays."""
    state.consumer.groups.pop(group_id, None)


def finish_upgrade(
    state: CoreState,
    classic: ClassicGroup,
    records: list[ConsumerGroupRecord],
    now_ms: int,
    fx: Effects,
) -> None:
    """The heartbeat was accepted: retire the classic group (its tombstone first, then the
    consumer group's records; the heartbeat's own follow), answer what it had parked, and start
    the converted members' sessions with their own session timeouts."""
    gid = classic.group_id
    fx.records.append(Record(GroupMetadataKey(gid), None))
    fx.records.extend(Record(r.key, r.value) for r in records)
    fx.events.append(GroupDeleted(gid))
    fx.events.append(GroupCreated(gid))
    timers = state.consumer.timers
    for m in classic.members.values():
        if m.join_reply_to is not None:
            fx.replies.append(
                (m.join_reply_to, JoinGroupResult(E.rebalance_in_progress, member_id=m.member_id))
            )
            m.join_reply_to = None
        if m.sync_reply_to is not None:
            fx.replies.append((m.sync_reply_to, SyncGroupResult(E.rebalance_in_progress)))
            m.sync_reply_to = None
        timers.schedule(TimerKind.SESSION, gid, m.member_id, now_ms + m.session_timeout_ms)
        fx.events.append(
            MemberJoined(gid, m.member_id, m.group_instance_id, m.client_id, m.client_host)
        )
    del state.groups[gid]
    state.topic_hashes.untrack(classic)


# -- downgrade -----------------------------------------------------------------------------------


def maybe_downgrade(
    state: CoreState, group_id: str, now_ms: int, fx: Effects, *, replaced: bool = False
) -> None:
    """After a fence: a consumer group left with classic members only becomes a classic group
    (validateOnlineDowngradeWithFencedMember's other rules: the policy, group.max.size).
    `replaced`: after a classic JoinGroup took the place of the last consumer-protocol (static)
    member instead (validateOnlineDowngradeWithReplacedMemberId): no epoch was bumped, so the
    generation is the group epoch, and no rebalance follows (Kafka's convertToClassicGroup with
    a joining member)."""
    group = state.consumer.groups.get(group_id)
    if group is None or not group.members:
        return
    if any(m.classic is None for m in group.members.values()):
        return
    if not _allows(state, "downgrade") or len(group.members) > state.config.max_group_size:
        return
    classic = ClassicGroup(group_id, state.wall(now_ms))
    classic.protocol_type = CONSUMER_PROTOCOL_TYPE
    # The epoch before the fence's bump: Kafka's generation (it converts instead of fencing), so
    # a reconciled classic member's generation is the group's and its heartbeat says "rejoin"
    # (REBALANCE_IN_PROGRESS) rather than ILLEGAL_GENERATION.
    classic.generation_id = group.group_epoch if replaced else group.group_epoch - 1
    for m in group.members.values():
        assert m.classic is not None
        classic.add(
            Member(
                m.member_id,
                m.instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.classic.session_timeout_ms,
                protocol_type=CONSUMER_PROTOCOL_TYPE,
                protocols=tuple(
                    Protocol(p.name, p.metadata) for p in m.classic.supported_protocols
                ),
            )
        )
    if not any(c == len(classic.members) for c in classic.protocol_counts.values()):
        return  # no protocol every member lists: it stays a consumer group
    name = classic.select_protocol()
    classic.protocol_name = name
    classic.subscribed_topics = classic.compute_subscribed_topics()
    for member in classic.members.values():
        target = group.target_assignment.get(member.member_id, EMPTY_PARTITIONS)
        member.assignment = assignment_bytes(state.topics, target, member.metadata(name))

    # The consumer group's tombstones: its members', then the group's (Kafka's
    # createGroupTombstoneRecords); its timers go with it.
    consumer = state.consumer
    tombstones: list[ConsumerGroupRecord] = []
    for mid in list(group.members):
        for record in remove_member_records(group_id, mid):
            consumer.replay(record)
            tombstones.append(record)
        consumer.timers.cancel_member(group_id, mid)
    _, rest = consumer.delete_group(group_id)
    tombstones.extend(rest)
    fx.records.extend(Record(r.key, r.value) for r in tombstones)
    fx.events.append(GroupDeleted(group_id))

    classic.previous_state = GroupState.EMPTY
    classic.state = GroupState.STABLE  # as ClassicGroup.fromConsumerGroup, then a rebalance
    state.groups[group_id] = classic
    fx.records.append(group_record(state, classic, now_ms))
    fx.events.append(GroupCreated(group_id))
    for member in classic.members.values():
        fx.events.append(
            MemberJoined(
                group_id,
                member.member_id,
                member.group_instance_id,
                member.client_id,
                member.client_host,
            )
        )
        state.timers.schedule_session(classic, member, member.session_timeout_ms, now_ms)
    if not replaced:
        prepare_rebalance(state, classic, RebalanceCause.MEMBER_LEFT, None, now_ms, fx)

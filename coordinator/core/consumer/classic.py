"""Classic members inside a consumer group (the online upgrade/downgrade, issue 23 item 6): Kafka
4.x's GroupMetadataManager `classicGroupJoinToConsumerGroup`, `classicGroupSyncToConsumerGroup`,
`classicGroupHeartbeatToConsumerGroup` and `classicGroupLeaveToConsumerGroup`.

A consumer that still speaks JoinGroup/SyncGroup/Heartbeat/LeaveGroup is a member of the
consumer group like any other (the server-side assignor assigns it, the group epoch counts it),
with its ClassicMemberMetadata (session timeout, the protocols it listed) in its record 5:
- JoinGroup creates or updates the member from the subscription in its first protocol's
  metadata (topics, rack, owned partitions), recomputes the target assignment if the group epoch
  moved, and reconciles it as a heartbeat would (revocation before assignment: what it still
  owns stays held until it rejoins without it). The answer: generation = its member epoch,
  protocol = its first protocol, no leader, no member list (every classic member is a
  follower). A new dynamic member with JoinGroup v4+ first gets MEMBER_ID_REQUIRED.
- SyncGroup answers its current assignment (serialized at the version of its own subscription),
  or REBALANCE_IN_PROGRESS when the group epoch moved past its epoch (it must rejoin first).
- Heartbeat answers REBALANCE_IN_PROGRESS when it must rejoin: the group epoch moved past its
  epoch, it has partitions to revoke, or partitions it waited for are now free.
- Its session timeout is its own; a JOIN timer (told to rejoin) and a SYNC timer (answered a
  JoinGroup) fence it after its rebalance timeout; LeaveGroup fences it.
A classic member's partitions are released only by its rejoin (or by fencing it), so no
partition is ever owned twice.

Where we differ from Kafka on purpose:
- The session and sync timers start when the JoinGroup is answered, not once its records are
  durable (the runtime releases the reply only after them anyway).
- A subscription that does not parse answers UNKNOWN_SERVER_ERROR with no records (Kafka throws
  IllegalStateException, the same code).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coordinator.core.consumer.coordinator import ConsumerGroupCoordinator
from coordinator.core.consumer.messages import ConsumerEvent
from coordinator.core.consumer.model import (
    EMPTY_PARTITIONS,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    PartitionMap,
)
from coordinator.core.consumer.op import Op as _Op
from coordinator.core.consumer.reconcile import reconcile
from coordinator.core.consumer.record_helpers import current_assignment_record
from coordinator.core.consumer.records import (
    ClassicMemberMetadata,
    ClassicProtocol,
    ConsumerGroupRecord,
    TopicPartitions,
)
from coordinator.core.consumer.timers import TimerKind
from coordinator.core.messages import (
    ErrorCode,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeftMember,
    SyncGroup,
    SyncGroupResult,
)
from coordinator.core.topics import TopicCatalog
from protocol import consumer as consumer_protocol

__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "ClassicResult",
    "assignment_bytes",
    "heartbeat",
    "join",
    "leave",
    "partition_map",
    "supports_protocols",
    "sync",
]

CONSUMER_PROTOCOL_TYPE = "consumer"
E = ErrorCode


@dataclass(frozen=True, slots=True)
class ClassicResult:
    """A classic request's answer and the records it depends on (already applied)."""

    response: JoinGroupResult | SyncGroupResult | LeaveGroupResult
    records: tuple[ConsumerGroupRecord, ...] = ()
    events: tuple[ConsumerEvent, ...] = ()


# -- conversions ---------------------------------------------------------------------------------


def partition_map(catalog: TopicCatalog, by_name: Mapping[str, Sequence[int]]) -> PartitionMap:
    """topic name -> partitions, by topic id; topics the catalog does not know are left out
    (Kafka's toTopicPartitionMap)."""
    out: dict[uuid.UUID, frozenset[int]] = {}
    for name, partitions in by_name.items():
        info = catalog.get(name)
        if info is not None and partitions:
            out[info.topic_id] = out.get(info.topic_id, frozenset()) | frozenset(partitions)
    return out if out else EMPTY_PARTITIONS


def assignment_bytes(catalog: TopicCatalog, partitions: PartitionMap, metadata: bytes) -> bytes:
    """A ConsumerProtocolAssignment of `partitions`, at the version of the member's subscription
    `metadata` (Kafka's prepareAssignment); ids the catalog no longer knows are left out."""
    by_name: dict[str, frozenset[int]] = {}
    for tid, ps in partitions.items():
        name = catalog.name_of(tid)
        if name is not None:
            by_name[name] = ps
    version = int.from_bytes(metadata[:2], "big", signed=True) if len(metadata) >= 2 else 0
    return consumer_protocol.encode_assignment(by_name, version)


def supports_protocols(group: ConsumerGroup, protocol_type: str, names: Sequence[str]) -> bool:
    """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and a name
    every classic member listed (any name when it is the first classic member)."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        return False
    listed = [
        {p.name for p in m.classic.supported_protocols}
        for m in group.members.values()
        if m.classic is not None
    ]
    return any(all(name in mine for mine in listed) for name in names)


def _settle(coord: ConsumerGroupCoordinator, op: _Op, group_id: str) -> None:
    """The end of a call that changed the group, as ConsumerGroupHeartbeat's (the events)."""
    coord.rebalances.settle(op, group_id, coord.config.assignors)


def _protocol_name(member: ConsumerGroupMember) -> str:
    assert member.classic is not None
    return member.classic.supported_protocols[0].name


# -- JoinGroup -----------------------------------------------------------------------------------


class _Refused(Exception):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


def join(coord: ConsumerGroupCoordinator, cmd: JoinGroup, now_ms: int) -> ClassicResult:
    """JoinGroup of a non-empty consumer group (Kafka's classicGroupJoinToConsumerGroup)."""
    group = coord.groups[cmd.group_id]
    unknown = not cmd.member_id
    member_id = cmd.member_id or coord._new_member_id()
    try:
        if (
            len(group.members) >= coord.config.max_size
            and member_id not in group.members
            and (cmd.group_instance_id is None or cmd.group_instance_id not in group.static_members)
        ):
            raise _Refused(E.group_max_size_reached)
        if not supports_protocols(group, cmd.protocol_type, [p.name for p in cmd.protocols]):
            raise _Refused(E.inconsistent_group_protocol)
        if unknown and cmd.group_instance_id is None and cmd.api_version >= 4:
            # KIP-394: the id to come back with; nothing is kept until it does.
            return ClassicResult(JoinGroupResult(E.member_id_required, member_id=member_id))
        member, replaced = _member_for(group, cmd, member_id, unknown)
        subscription = consumer_protocol.subscription(cmd.protocols[0].metadata)
        if subscription is None:
            raise _Refused(E.unknown_server_error)
    except _Refused as e:
        return ClassicResult(JoinGroupResult(e.error, member_id=cmd.member_id))

    updated = dataclasses.replace(
        member,
        instance_id=(
            cmd.group_instance_id if cmd.group_instance_id is not None else member.instance_id
        ),
        rack_id=subscription.rack_id if subscription.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            cmd.rebalance_timeout_ms
            if cmd.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        subscribed_topic_names=frozenset(subscription.topics),
        client_id=cmd.client_id,
        client_host=cmd.client_host,
        classic=ClassicMemberMetadata(
            cmd.session_timeout_ms,
            tuple(ClassicProtocol(p.name, p.metadata) for p in cmd.protocols),
        ),
    )
    op = _Op(coord.groups, now_ms)
    gid = group.group_id
    if replaced is not None:
        coord._replace_static_member(op, group, replaced, member)
    added = member_id not in group.members
    bump = coord._write_subscription(op, group, member, updated, added)
    if bump or gid in coord._refresh_metadata:
        cause = "member_joined" if added else "subscription_changed" if bump else ""
        coord._update_metadata(op, group, bump, cause, updated)
    coord._maybe_update_target(op, group)

    current = group.members[member_id]
    if not current.is_reconciled_to(group.assignment_epoch):
        owned = _owned(coord.catalog, subscription.owned_partitions)
        if current.state is MemberState.UNKNOWN:
            owned = ()  # a classic member that rejoins has given up what it owned
        reconciled = reconcile(
            current,
            group.assignment_epoch,
            group.target_assignment.get(member_id, EMPTY_PARTITIONS),
            group.current_partition_epoch,
            owned,
        )
        if reconciled != current:
            op.emit(current_assignment_record(gid, reconciled))
    final = group.members[member_id]
    coord.rebalances.reconciled(op.events, now_ms, group, current, final)
    _settle(coord, op, gid)

    timers = coord.timers
    timers.cancel(TimerKind.JOIN, gid, member_id)
    timers.schedule(TimerKind.SESSION, gid, member_id, now_ms + cmd.session_timeout_ms)
    timers.schedule(
        TimerKind.SYNC, gid, member_id, now_ms + final.rebalance_timeout_ms, final.member_epoch
    )
    response = JoinGroupResult(
        E.none,
        generation_id=final.member_epoch,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        protocol_name=cmd.protocols[0].name,
        leader="",
        skip_assignment=False,
        member_id=member_id,
        members=(),
    )
    return ClassicResult(response, tuple(op.records), tuple(op.events))


def _member_for(
    group: ConsumerGroup, cmd: JoinGroup, member_id: str, unknown: bool
) -> tuple[ConsumerGroupMember, ConsumerGroupMember | None]:
    """Kafka's getOrMaybeSubscribe{Dynamic,Static}ConsumerGroupMember with useClassicProtocol:
    a dynamic member id is created if unknown; a new static member takes over its instance id
    from whichever member holds it (no unreleased check for the classic protocol)."""
    instance_id = cmd.group_instance_id
    if instance_id is None:
        return group.members.get(member_id) or ConsumerGroupMember(member_id), None
    existing = group.static_member(instance_id)
    if unknown:
        if existing is None:
            return group.members.get(member_id) or ConsumerGroupMember(member_id), None
        copy = dataclasses.replace(
            existing, member_id=member_id, member_epoch=0, previous_member_epoch=0
        )
        return copy, existing
    if existing is None:
        raise _Refused(E.unknown_member_id)
    if existing.member_id != member_id:
        raise _Refused(E.fenced_instance_id)
    return existing, None


def _owned(
    catalog: TopicCatalog, by_name: Mapping[str, Sequence[int]]
) -> tuple[TopicPartitions, ...]:
    owned = partition_map(catalog, by_name)
    return tuple(
        TopicPartitions(tid, tuple(sorted(ps)))
        for tid, ps in sorted(owned.items(), key=lambda kv: kv[0].int)
    )


# -- SyncGroup, Heartbeat ------------------------------------------------------------------------


def _member(
    group: ConsumerGroup, member_id: str, instance_id: str | None
) -> ConsumerGroupMember | ErrorCode:
    """Kafka's validateConsumerGroupMember, then throwIfMemberDoesNotUseClassicProtocol."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            return E.unknown_member_id
    else:
        member = group.static_member(instance_id)
        if member is None:
            return E.unknown_member_id
        if member.member_id != member_id:
            return E.fenced_instance_id
    return E.unknown_member_id if member.classic is None else member


def _rejoin_soon(
    coord: ConsumerGroupCoordinator, group: ConsumerGroup, m: ConsumerGroupMember, now_ms: int
) -> None:
    """Kafka's scheduleConsumerGroupJoinTimeoutIfAbsent: fenced unless it rejoins in time."""
    if not coord.timers.scheduled(TimerKind.JOIN, group.group_id, m.member_id):
        coord.timers.schedule(
            TimerKind.JOIN, group.group_id, m.member_id, now_ms + m.rebalance_timeout_ms,
            m.member_epoch,
        )  # fmt: skip


def sync(coord: ConsumerGroupCoordinator, cmd: SyncGroup, now_ms: int) -> SyncGroupResult:
    """SyncGroup of a non-empty consumer group (Kafka's classicGroupSyncToConsumerGroup)."""
    group = coord.groups[cmd.group_id]
    member = _member(group, cmd.member_id, cmd.group_instance_id)
    if isinstance(member, ErrorCode):
        return SyncGroupResult(member)
    if cmd.generation_id != member.member_epoch:
        return SyncGroupResult(E.illegal_generation)
    if (cmd.protocol_type is not None and cmd.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
        cmd.protocol_name is not None and cmd.protocol_name != _protocol_name(member)
    ):
        return SyncGroupResult(E.inconsistent_group_protocol)
    if group.group_epoch > member.member_epoch and (
        member.state is not MemberState.UNREVOKED_PARTITIONS
    ):
        # A newer epoch: rejoin first. A member revoking partitions finishes that first.
        _rejoin_soon(coord, group, member, now_ms)
        return SyncGroupResult(E.rebalance_in_progress)
    assert member.classic is not None
    gid, mid = group.group_id, member.member_id
    coord.timers.cancel(TimerKind.SYNC, gid, mid)
    coord.timers.schedule(TimerKind.SESSION, gid, mid, now_ms + member.classic.session_timeout_ms)
    metadata = member.classic.supported_protocols[0].metadata
    assignment = assignment_bytes(coord.catalog, member.assigned_partitions, metadata)
    return SyncGroupResult(E.none, cmd.protocol_type, cmd.protocol_name, assignment)


def heartbeat(coord: ConsumerGroupCoordinator, cmd: Heartbeat, now_ms: int) -> HeartbeatResult:
    """Heartbeat of a non-empty consumer group (Kafka's classicGroupHeartbeatToConsumerGroup)."""
    group = coord.groups[cmd.group_id]
    member = _member(group, cmd.member_id, cmd.group_instance_id)
    if isinstance(member, ErrorCode):
        return HeartbeatResult(member)
    if cmd.generation_id != member.member_epoch:
        return HeartbeatResult(E.illegal_generation)
    assert member.classic is not None
    gid, mid = group.group_id, member.member_id
    coord.timers.schedule(TimerKind.SESSION, gid, mid, now_ms + member.classic.session_timeout_ms)
    # Rejoin when the group epoch moved on, to revoke partitions, or to take partitions it
    # waited for that are now free.
    state = member.state
    if (
        member.member_epoch < group.group_epoch
        or state is MemberState.UNREVOKED_PARTITIONS
        or (state is MemberState.UNRELEASED_PARTITIONS and not _waiting(group, member))
    ):
        _rejoin_soon(coord, group, member, now_ms)
        return HeartbeatResult(E.rebalance_in_progress)
    return HeartbeatResult(E.none)


def _waiting(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """Kafka's waitingOnUnreleasedPartition: a partition of its target still held elsewhere."""
    target = group.target_assignment.get(member.member_id, EMPTY_PARTITIONS)
    for tid, partitions in target.items():
        mine = member.assigned_partitions.get(tid, frozenset())
        for p in partitions:
            if p not in mine and group.current_partition_epoch(tid, p) != -1:
                return True
    return False


# -- LeaveGroup ----------------------------------------------------------------------------------


def leave(coord: ConsumerGroupCoordinator, cmd: LeaveGroup, now_ms: int) -> ClassicResult:
    """LeaveGroup of a non-empty consumer group (Kafka's classicGroupLeaveToConsumerGroup): each
    classic member named is fenced; consumer-protocol members are UNKNOWN_MEMBER_ID here."""
    group = coord.groups[cmd.group_id]
    results: list[LeftMember] = []
    leaving: dict[str, ConsumerGroupMember] = {}
    for m in cmd.members:
        error = E.none
        member_id = m.member_id
        if m.group_instance_id is None:
            member = group.members.get(m.member_id)
        else:
            member = group.static_member(m.group_instance_id)
            if member is not None and m.member_id and member.member_id != m.member_id:
                error = E.fenced_instance_id
        if member is None or (error is E.none and member.classic is None):
            error = E.unknown_member_id
        if error is E.none and member is not None:
            member_id = member.member_id
            leaving[member_id] = member
        results.append(LeftMember(member_id, m.group_instance_id, error))
    op = _Op(coord.groups, now_ms)
    if leaving:
        coord._fence(op, group, list(leaving.values()), "left")
        _settle(coord, op, group.group_id)
    return ClassicResult(
        LeaveGroupResult(E.none, tuple(results)), tuple(op.records), tuple(op.events)
    )

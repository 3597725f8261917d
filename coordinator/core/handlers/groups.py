"""DescribeGroups v0-v5, ListGroups v0-v5, DeleteGroups v0-v2 (docs/protocol.md §11).

Rules:
- DescribeGroups: per group; loading -> COORDINATOR_LOAD_IN_PROGRESS; an unknown group is "Dead"
  with NONE, v6+ GROUP_ID_NOT_FOUND (KIP-1043); members' metadata and the protocol name only
  when Stable, as Kafka shows them.
- ListGroups: loading -> COORDINATOR_LOAD_IN_PROGRESS; the states filter (v4+, KIP-518) and the
  types filter (v5+, KIP-848: "classic", or "consumer" for the KIP-848 groups, which list with
  protocol type "consumer" and their state: Empty, Assigning, Reconciling, Stable), both
  case-insensitive.
- DescribeGroups answers classic groups only: a KIP-848 group is "Dead" as an unknown one
  (Kafka's describeGroups: "Group X is not a classic group").
- DeleteGroups: per group; loading -> COORDINATOR_LOAD_IN_PROGRESS; an unknown group ->
  GROUP_ID_NOT_FOUND; the group's state (STATE_REPLIES, Check.DELETE: only an Empty group is
  deleted, with its offsets); a KIP-848 group: NON_EMPTY_GROUP unless Empty
  (core.handlers.consumer.delete).
- KIP-932 share groups (as Kafka 4.4 answers, tests/share): listed with protocol type and group
  type "share" and their state (Empty, Stable); DescribeGroups answers them as any non-classic
  group ("Dead", v6+ GROUP_ID_NOT_FOUND "Group X is not a classic group."); DeleteGroups:
  NON_EMPTY_GROUP with members, otherwise the group and its share partitions' state go.
"""

from __future__ import annotations

from coordinator.core.effects import Effects
from coordinator.core.events import GroupDeleted
from coordinator.core.group import Check, GroupState
from coordinator.core.handlers import consumer, share_admin
from coordinator.core.messages import (
    DeletedGroup,
    DeleteGroups,
    DeleteGroupsResult,
    DescribedGroup,
    DescribedMember,
    DescribeGroups,
    DescribeGroupsResult,
    ErrorCode,
    ListedGroup,
    ListGroups,
    ListGroupsResult,
)
from coordinator.core.records import GroupMetadataKey, OffsetCommitKey, Record
from coordinator.core.share.records import (
    ShareGroupMetadataKey,
    ShareGroupTargetAssignmentMetadataKey,
)
from coordinator.core.state import CoreState

E = ErrorCode


def describe(
    state: CoreState, reply_to: int, cmd: DescribeGroups, now_ms: int, fx: Effects
) -> None:
    out: list[DescribedGroup] = []
    for gid in cmd.group_ids:
        if state.loading:
            out.append(DescribedGroup(E.coordinator_load_in_progress, gid, "", "", "", ()))
            continue
        group = state.groups.get(gid)
        if group is None:
            if cmd.api_version >= 6:  # KIP-1043, with Kafka's messages (GroupMetadataManager)
                message = (
                    f"Group {gid} is not a classic group."
                    if gid in state.consumer.groups or gid in state.share.groups
                    else f"Group {gid} not found."
                )
                out.append(DescribedGroup(E.group_id_not_found, gid, "Dead", "", "", (), message))
            else:
                out.append(DescribedGroup(E.none, gid, "Dead", "", "", ()))
            continue
        stable = group.state is GroupState.STABLE
        # Equivalent under mutation, here and in the two guards below: outside Stable, name is
        # None and no protocol is named None, so metadata() is b"" anyway; in Stable the
        # group always has a protocol_name.
        name = group.protocol_name if stable else None  # pragma: no mutate
        members = tuple(
            DescribedMember(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata(name) if stable else b"",  # pragma: no mutate
                m.assignment,
            )
            for m in group.members.values()
        )
        out.append(
            DescribedGroup(
                E.none,
                gid,
                group.state.value,
                group.protocol_type or "",
                (group.protocol_name or "") if stable else "",  # pragma: no mutate
                members,
            )
        )
    fx.replies.append((reply_to, DescribeGroupsResult(tuple(out))))


def list_groups(state: CoreState, reply_to: int, cmd: ListGroups, now_ms: int, fx: Effects) -> None:
    fx.replies.append((reply_to, _list(state, cmd)))


def _list(state: CoreState, cmd: ListGroups) -> ListGroupsResult:
    if state.loading:
        return ListGroupsResult(E.coordinator_load_in_progress, ())
    states = {s.strip().lower() for s in cmd.states_filter}
    types = {t.strip().lower() for t in cmd.types_filter}
    listed: list[ListedGroup] = []
    if not types or "classic" in types:
        listed.extend(
            ListedGroup(gid, g.protocol_type or "", g.state.value, "classic")
            for gid, g in state.groups.items()
            if not states or g.state.value.lower() in states
        )
    if not types or "consumer" in types:
        listed.extend(
            ListedGroup(gid, "consumer", s.value, "consumer")
            for gid, s in state.consumer.list_groups()
            if not states or s.value.lower() in states
        )
    if not types or "share" in types:  # KIP-932: protocol type and group type "share"
        listed.extend(
            ListedGroup(gid, "share", g.state.value, "share")
            for gid, g in state.share.groups.items()
            if not states or g.state.value.lower() in states
        )
    return ListGroupsResult(E.none, tuple(listed))


def delete(state: CoreState, reply_to: int, cmd: DeleteGroups, now_ms: int, fx: Effects) -> None:
    results: list[DeletedGroup] = []
    for gid in cmd.group_ids:
        if not state.loading and gid in state.consumer.groups:
            results.append(DeletedGroup(gid, consumer.delete(state, gid, fx)))
            continue
        if not state.loading and gid in state.share.groups:
            results.append(DeletedGroup(gid, _delete_share_group(state, gid, fx)))
            continue
        error = state.admin_error(state.groups.get(gid), Check.DELETE)
        if error is None:
            remove_group(state, gid, fx)
        results.append(DeletedGroup(gid, error or E.none))
    fx.replies.append((reply_to, DeleteGroupsResult(tuple(results))))


def _delete_share_group(state: CoreState, gid: str, fx: Effects) -> ErrorCode:
    """KIP-932: a share group with members -> NON_EMPTY_GROUP; an Empty one is deleted with its
    share partitions' state (Kafka deletes its share-coordinator state too)."""
    if state.share.groups[gid].members:
        return E.non_empty_group
    share_admin.drop_partitions(state, fx, gid)
    for key in (ShareGroupTargetAssignmentMetadataKey(gid), ShareGroupMetadataKey(gid)):
        fx.records.append(Record(key, None))
    state.share.unload_group(gid)
    fx.events.append(GroupDeleted(gid))
    return E.none


def remove_group(state: CoreState, gid: str, fx: Effects) -> None:
    """Delete an Empty group and its offsets (tombstones): DeleteGroups, or retention."""
    for topic, partition in state.offsets.drop_group(gid):
        fx.records.append(Record(OffsetCommitKey(gid, topic, partition), None))
    for pending in state.txn_pending.drop_group(gid):  # Kafka deletes pending offsets too
        fx.records.append(Record(pending, None))
    fx.records.append(Record(GroupMetadataKey(gid), None))
    group = state.groups.pop(gid)
    state.topic_hashes.untrack(group)
    fx.events.append(GroupDeleted(gid))

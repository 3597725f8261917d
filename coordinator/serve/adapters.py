"""kio requests of any version <-> the version-neutral commands and results of `messages`.

`to_command` turns a decoded group request into a Command (or, for the few checks Kafka makes on
the wire before any group logic, directly into the kio response). `to_response` turns a Result into
the kio response of the request's version; `error_response` answers any group request with one
error (coordinator loading, failed write, shutdown).

Invariants (docs/protocol.md §2, §11, §15):
- JoinGroup v0 has no rebalance timeout: the session timeout is used (JoinGroupRequest
  `maybeOverrideRebalanceTimeout`). JoinGroup ProtocolName is "" for v<7 and null for v>=7
  (JoinGroupResponse); ProtocolType is only sent from v7, SkipAssignment from v9.
- SyncGroup v5+ with a null ProtocolType or ProtocolName is answered INCONSISTENT_GROUP_PROTOCOL
  before any group logic (KafkaApis `handleSyncGroupRequest`).
- LeaveGroup v0-2 carry one member and no member list in the reply: the member's error is copied to
  the top level when the top-level error is NONE (LeaveGroupResponse).
- OffsetCommit has no top-level error: a group error is every partition's error.
- OffsetFetch v1: a group error is copied into every partition (offset -1, metadata ""); v2-7: the
  top-level ErrorCode; v8+: the group's ErrorCode.
- DescribeGroups before v6 never reports GROUP_ID_NOT_FOUND: an unknown group is "Dead" with NONE.
- KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe: coordinator.serve.consumer_adapters,
  registered in the tables here; KIP-932's ShareGroupHeartbeat and ShareGroupDescribe likewise
  (coordinator.serve.share_adapters).
- Pure: no I/O. Per-version kio classes come from `protocol.apis`' cached modules.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from coordinator.core import messages as m
from coordinator.core.effects import AnyCommand, AnyResult
from coordinator.serve import consumer_adapters, share_adapters
from coordinator.serve import group_config_adapters as group_configs
from coordinator.serve import share_admin_adapters as share_admin
from protocol import apis, codec, fastpath
from protocol.apis import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from protocol.codec import RequestHeader

__all__ = ["COMMAND_TYPES", "GROUP_APIS", "error_response", "to_command", "to_response"]

_ONE_MS: Final = timedelta(milliseconds=1)
_ZERO_THROTTLE: Final = i32Timedelta.parse(timedelta(0))
_AUTHORIZED_OPERATIONS_OMITTED: Final = -(2**31)  # INT32_MIN: "not requested" (§11)
_NONE: Final = ErrorCode.none

GROUP_APIS: Final = apis.GROUP_APIS

COMMAND_TYPES: Final = (
    m.JoinGroup,
    m.SyncGroup,
    m.Heartbeat,
    m.LeaveGroup,
    m.OffsetCommit,
    m.OffsetFetch,
    m.OffsetDelete,
    m.DescribeGroups,
    m.ListGroups,
    m.DeleteGroups,
    *consumer_adapters.COMMAND_TYPES,  # KIP-848
    *share_adapters.COMMAND_TYPES,  # KIP-932
    *share_admin.COMMAND_TYPES,  # KIP-932's offset admin APIs (90-92)
    *group_configs.COMMAND_TYPES,  # DescribeConfigs / IncrementalAlterConfigs on GROUP (32, 44)
)

_request_module = apis.request_module
_response_module = apis.response_module


_ms_values: dict[int, int] = {}


def fast_commit(
    version: int,
    correlation_id: int,
    client_id: str,
    group_id: str,
    generation_id: int,
    member_id: str,
    group_instance_id: str | None,
    retention_time_ms: int,
    topics: tuple[m.CommitTopic, ...],
) -> tuple[RequestHeader, m.OffsetCommit]:
    """The fast path's OffsetCommit as the header and command `dispatch` would have made."""
    command = m.OffsetCommit(
        group_id, generation_id, member_id, group_instance_id, retention_time_ms, topics, version
    )
    return RequestHeader(apis.OFFSET_COMMIT, version, correlation_id, client_id), command


def _ms(value: timedelta) -> int:
    """Milliseconds, one int object per distinct value: members keep their timeouts, and a few
    values are shared by thousands of them (an int above 256 is a new 32-byte object each time)."""
    ms: int = value // _ONE_MS
    if len(_ms_values) < 4096:
        return _ms_values.setdefault(ms, ms)
    return _ms_values.get(ms, ms)


def _td(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(timedelta(milliseconds=ms))


# --------------------------------------------------------------------------------------------------
# Requests -> commands


# Members of one group nearly always send the same protocols (names and subscription bytes), and
# a member keeps them for its whole life: share one tuple between them instead of one copy per
# member (the RSS benchmark counts every byte a member holds). Bounded: cleared when full, so a
# client that sends a new subscription on every join cannot grow it.
_SHARED_PROTOCOLS_MAX: Final = 4096
_shared_protocols: dict[tuple[m.Protocol, ...], tuple[m.Protocol, ...]] = {}


def _protocols(r: Any) -> tuple[m.Protocol, ...]:
    protocols = tuple(m.Protocol(sys.intern(p.name), p.metadata) for p in r.protocols)
    shared = _shared_protocols.get(protocols)
    if shared is not None:
        return shared
    if len(_shared_protocols) >= _SHARED_PROTOCOLS_MAX:
        _shared_protocols.clear()
    _shared_protocols[protocols] = protocols
    return protocols


def _join_group(header: RequestHeader, r: Any, client_host: str) -> m.JoinGroup:
    v = header.api_version
    session_timeout_ms = _ms(r.session_timeout)
    return m.JoinGroup(
        group_id=r.group_id,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=session_timeout_ms if v == 0 else _ms(r.rebalance_timeout),
        member_id=r.member_id,
        group_instance_id=r.group_instance_id if v >= 5 else None,
        protocol_type=sys.intern(r.protocol_type),
        protocols=_protocols(r),
        reason=r.reason if v >= 8 else None,
        client_id=sys.intern(header.client_id),
        client_host=client_host,
        api_version=v,
    )


def _sync_group(header: RequestHeader, r: Any, client_host: str) -> m.SyncGroup | object:
    v = header.api_version
    if v >= 5 and (r.protocol_type is None or r.protocol_name is None):
        # Checked on the wire before authorisation (SyncGroupRequest
        # `areMandatoryProtocolTypeAndNamePresent`).
        return error_response(header, r, ErrorCode.inconsistent_group_protocol)
    return m.SyncGroup(
        group_id=r.group_id,
        generation_id=r.generation_id,
        member_id=r.member_id,
        group_instance_id=r.group_instance_id if v >= 3 else None,
        protocol_type=r.protocol_type if v >= 5 else None,
        protocol_name=r.protocol_name if v >= 5 else None,
        assignments=tuple(m.SyncAssignment(a.member_id, a.assignment) for a in r.assignments),
        api_version=v,
    )


def _heartbeat(header: RequestHeader, r: Any, client_host: str) -> m.Heartbeat:
    return m.Heartbeat(
        group_id=r.group_id,
        generation_id=r.generation_id,
        member_id=r.member_id,
        group_instance_id=r.group_instance_id if header.api_version >= 3 else None,
    )


def _leave_group(header: RequestHeader, r: Any, client_host: str) -> m.LeaveGroup:
    v = header.api_version
    if v <= 2:  # LeaveGroupRequest `normalizedData`: one member, no instance id
        members: tuple[m.LeavingMember, ...] = (m.LeavingMember(r.member_id, None),)
    elif v <= 4:
        members = tuple(m.LeavingMember(x.member_id, x.group_instance_id) for x in r.members)
    else:
        members = tuple(
            m.LeavingMember(x.member_id, x.group_instance_id, x.reason) for x in r.members
        )
    return m.LeaveGroup(group_id=r.group_id, members=members, api_version=v)


def _offset_commit(header: RequestHeader, r: Any, client_host: str) -> m.OffsetCommit:
    v = header.api_version
    with_epoch = v >= 6
    topics = tuple(
        m.CommitTopic(
            t.name,
            tuple(
                m.CommitPartition(
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch if with_epoch else -1,
                    p.committed_metadata,
                )
                for p in t.partitions
            ),
        )
        for t in r.topics
    )
    return m.OffsetCommit(
        group_id=r.group_id,
        generation_id=r.generation_id_or_member_epoch,
        member_id=r.member_id,
        group_instance_id=r.group_instance_id if v >= 7 else None,
        retention_time_ms=_ms(r.retention_time) if v <= 4 else -1,
        topics=topics,
        api_version=v,
    )


def _fetch_topics(topics: Any) -> tuple[m.FetchTopic, ...] | None:
    if topics is None:
        return None
    return tuple(m.FetchTopic(t.name, tuple(t.partition_indexes)) for t in topics)


def _offset_fetch(header: RequestHeader, r: Any, client_host: str) -> m.OffsetFetch:
    v = header.api_version
    if v <= 7:
        groups: tuple[m.FetchGroup, ...] = (m.FetchGroup(r.group_id, _fetch_topics(r.topics)),)
    else:  # v8+: batched (KIP-709); v9's member id/epoch: checked for consumer groups only
        groups = tuple(
            m.FetchGroup(g.group_id, _fetch_topics(g.topics), *_member(v, g)) for g in r.groups
        )
    return m.OffsetFetch(groups=groups, require_stable=v >= 7 and r.require_stable, api_version=v)


def _member(v: int, g: Any) -> tuple[str | None, int]:
    """OffsetFetch v9's member id and epoch (KIP-848); before v9 none."""
    return (g.member_id, g.member_epoch) if v >= 9 else (None, -1)


def _offset_delete(header: RequestHeader, r: Any, client_host: str) -> m.OffsetDelete:
    topics = tuple(
        m.FetchTopic(t.name, tuple(p.partition_index for p in t.partitions)) for t in r.topics
    )
    return m.OffsetDelete(group_id=r.group_id, topics=topics)


def _describe_groups(header: RequestHeader, r: Any, client_host: str) -> m.DescribeGroups:
    return m.DescribeGroups(group_ids=tuple(r.groups), api_version=header.api_version)


def _list_groups(header: RequestHeader, r: Any, client_host: str) -> m.ListGroups:
    v = header.api_version
    return m.ListGroups(
        states_filter=tuple(r.states_filter) if v >= 4 else (),
        types_filter=tuple(r.types_filter) if v >= 5 else (),
    )


def _delete_groups(header: RequestHeader, r: Any, client_host: str) -> m.DeleteGroups:
    return m.DeleteGroups(group_ids=tuple(r.groups_names))


_TO_COMMAND: Final[dict[int, Callable[[RequestHeader, Any, str], object]]] = {
    JOIN_GROUP: _join_group,
    SYNC_GROUP: _sync_group,
    HEARTBEAT: _heartbeat,
    LEAVE_GROUP: _leave_group,
    OFFSET_COMMIT: _offset_commit,
    OFFSET_FETCH: _offset_fetch,
    OFFSET_DELETE: _offset_delete,
    DESCRIBE_GROUPS: _describe_groups,
    LIST_GROUPS: _list_groups,
    DELETE_GROUPS: _delete_groups,
    **consumer_adapters.TO_COMMAND,  # KIP-848: ConsumerGroupHeartbeat, ConsumerGroupDescribe
    **share_adapters.TO_COMMAND,  # KIP-932: ShareGroupHeartbeat, ShareGroupDescribe
    **share_admin.TO_COMMAND,  # KIP-932: Describe/Alter/DeleteShareGroupOffsets
    **group_configs.TO_COMMAND,  # the GROUP config resource: DescribeConfigs (32), 44
}


def to_command(header: RequestHeader, request: object, client_host: str) -> AnyCommand | object:
    """The Command for a decoded group request, or a kio response when the wire rules alone answer
    it (check with `isinstance(result, COMMAND_TYPES)`). `client_host` is "/" + IP literal."""
    return _TO_COMMAND[header.api_key](header, request, client_host)


# --------------------------------------------------------------------------------------------------
# Results -> responses


def _join_group_response(v: int, res: m.JoinGroupResult) -> object:
    mod = _response_module(JOIN_GROUP, v)
    member_cls = mod.JoinGroupResponseMember
    if v >= 5:
        members = tuple(
            member_cls(
                member_id=x.member_id, group_instance_id=x.group_instance_id, metadata=x.metadata
            )
            for x in res.members
        )
    else:
        members = tuple(member_cls(member_id=x.member_id, metadata=x.metadata) for x in res.members)
    kwargs: dict[str, Any] = {
        "error_code": res.error,
        "generation_id": res.generation_id,
        "leader": res.leader,
        "member_id": res.member_id,
        "members": members,
    }
    if v >= 2:
        kwargs["throttle_time"] = _ZERO_THROTTLE
    if v >= 7:  # KIP-559; "" and null both mean "none chosen", null from v7
        kwargs["protocol_type"] = res.protocol_type
        kwargs["protocol_name"] = res.protocol_name or None
    else:
        kwargs["protocol_name"] = res.protocol_name or ""
    if v >= 9:
        kwargs["skip_assignment"] = res.skip_assignment
    return mod.JoinGroupResponse(**kwargs)


def _sync_group_response(v: int, res: m.SyncGroupResult) -> object:
    cls = _response_module(SYNC_GROUP, v).SyncGroupResponse
    if v >= 5:
        return cls(
            throttle_time=_ZERO_THROTTLE,
            error_code=res.error,
            protocol_type=res.protocol_type,
            protocol_name=res.protocol_name,
            assignment=res.assignment,
        )
    if v >= 1:
        return cls(throttle_time=_ZERO_THROTTLE, error_code=res.error, assignment=res.assignment)
    return cls(error_code=res.error, assignment=res.assignment)


def _heartbeat_response(v: int, res: m.HeartbeatResult) -> object:
    cls = _response_module(HEARTBEAT, v).HeartbeatResponse
    if v >= 1:
        return cls(throttle_time=_ZERO_THROTTLE, error_code=res.error)
    return cls(error_code=res.error)


def _leave_group_response(v: int, res: m.LeaveGroupResult) -> object:
    mod = _response_module(LEAVE_GROUP, v)
    if v <= 2:
        error = res.error
        if error == _NONE and res.members:  # LeaveGroupResponse: the member's error moves up
            error = res.members[0].error
        if v == 0:
            return mod.LeaveGroupResponse(error_code=error)
        return mod.LeaveGroupResponse(throttle_time=_ZERO_THROTTLE, error_code=error)
    member_cls = mod.MemberResponse
    members = tuple(
        member_cls(member_id=x.member_id, group_instance_id=x.group_instance_id, error_code=x.error)
        for x in res.members
    )
    return mod.LeaveGroupResponse(
        throttle_time=_ZERO_THROTTLE, error_code=res.error, members=members
    )


def _offset_commit_response(v: int, res: m.OffsetCommitResult) -> object:
    mod = _response_module(OFFSET_COMMIT, v)
    topic_cls = mod.OffsetCommitResponseTopic
    partition_cls = mod.OffsetCommitResponsePartition
    topics = tuple(
        topic_cls(
            name=t.name,
            partitions=tuple(
                partition_cls(partition_index=p.partition, error_code=p.error) for p in t.partitions
            ),
        )
        for t in res.topics
    )
    if v >= 3:
        return mod.OffsetCommitResponse(throttle_time=_ZERO_THROTTLE, topics=topics)
    return mod.OffsetCommitResponse(topics=topics)


def _offset_fetch_response(v: int, res: m.OffsetFetchResult) -> object:
    mod = _response_module(OFFSET_FETCH, v)
    if v >= 8:
        topic_cls = mod.OffsetFetchResponseTopics
        partition_cls = mod.OffsetFetchResponsePartitions
        groups = tuple(
            mod.OffsetFetchResponseGroup(
                group_id=g.group_id,
                topics=_fetched_topics(topic_cls, partition_cls, g.topics, True, None),
                error_code=g.error,
            )
            for g in res.groups
        )
        return mod.OffsetFetchResponse(throttle_time=_ZERO_THROTTLE, groups=groups)
    group = res.groups[0] if res.groups else m.FetchedGroup("", _NONE, ())
    # v1 has no top-level error: a group error is every partition's error (offset -1, "").
    copy_error = group.error if v == 1 and group.error != _NONE else None
    topics = _fetched_topics(
        mod.OffsetFetchResponseTopic,
        mod.OffsetFetchResponsePartition,
        group.topics,
        v >= 5,
        copy_error,
    )
    if v == 1:
        return mod.OffsetFetchResponse(topics=topics)
    if v == 2:
        return mod.OffsetFetchResponse(topics=topics, error_code=group.error)
    return mod.OffsetFetchResponse(
        throttle_time=_ZERO_THROTTLE, topics=topics, error_code=group.error
    )


def _fetched_topics(
    topic_cls: Any,
    partition_cls: Any,
    topics: tuple[m.FetchedTopic, ...],
    with_epoch: bool,
    copy_error: ErrorCode | None,
) -> tuple[object, ...]:
    def partition(p: m.FetchedPartition) -> object:
        if copy_error is not None:
            offset, epoch, metadata, error = -1, -1, "", copy_error
        else:
            offset, epoch, metadata, error = p.offset, p.leader_epoch, p.metadata, p.error
        if with_epoch:
            return partition_cls(
                partition_index=p.partition,
                committed_offset=offset,
                committed_leader_epoch=epoch,
                metadata=metadata,
                error_code=error,
            )
        return partition_cls(
            partition_index=p.partition,
            committed_offset=offset,
            metadata=metadata,
            error_code=error,
        )

    return tuple(
        topic_cls(name=t.name, partitions=tuple(partition(p) for p in t.partitions)) for t in topics
    )


def _offset_delete_response(v: int, res: m.OffsetDeleteResult) -> object:
    mod = _response_module(OFFSET_DELETE, v)
    partition_cls = mod.OffsetDeleteResponsePartition
    topics = tuple(
        mod.OffsetDeleteResponseTopic(
            name=t.name,
            partitions=tuple(
                partition_cls(partition_index=p.partition, error_code=p.error) for p in t.partitions
            ),
        )
        for t in res.topics
    )
    # Field order on the wire is ErrorCode, ThrottleTimeMs, Topics; kio's schema encodes that.
    return mod.OffsetDeleteResponse(
        error_code=res.error, throttle_time=_ZERO_THROTTLE, topics=topics
    )


def _describe_groups_response(v: int, res: m.DescribeGroupsResult) -> object:
    mod = _response_module(DESCRIBE_GROUPS, v)
    member_cls = mod.DescribedGroupMember
    group_cls = mod.DescribedGroup

    def member(x: m.DescribedMember) -> object:
        if v >= 4:
            return member_cls(
                member_id=x.member_id,
                group_instance_id=x.group_instance_id,
                client_id=x.client_id,
                client_host=x.client_host,
                member_metadata=x.metadata,
                member_assignment=x.assignment,
            )
        return member_cls(
            member_id=x.member_id,
            client_id=x.client_id,
            client_host=x.client_host,
            member_metadata=x.metadata,
            member_assignment=x.assignment,
        )

    def group(g: m.DescribedGroup) -> object:
        error = g.error
        if error == ErrorCode.group_id_not_found and v < 6:  # KIP-1043 is v6+
            error = _NONE
        kwargs: dict[str, Any] = {
            "error_code": error,
            "group_id": g.group_id,
            "group_state": g.state,
            "protocol_type": g.protocol_type,
            "protocol_data": g.protocol_data,
            "members": tuple(member(x) for x in g.members),
        }
        if v >= 3:
            kwargs["authorized_operations"] = _AUTHORIZED_OPERATIONS_OMITTED
        if v >= 6:
            kwargs["error_message"] = g.error_message if error != _NONE else None
        return group_cls(**kwargs)

    groups = tuple(group(g) for g in res.groups)
    if v >= 1:
        return mod.DescribeGroupsResponse(throttle_time=_ZERO_THROTTLE, groups=groups)
    return mod.DescribeGroupsResponse(groups=groups)


def _list_groups_response(v: int, res: m.ListGroupsResult) -> object:
    mod = _response_module(LIST_GROUPS, v)
    listed_cls = mod.ListedGroup
    if v >= 5:
        groups = tuple(
            listed_cls(
                group_id=g.group_id,
                protocol_type=g.protocol_type,
                group_state=g.state,
                group_type=g.group_type,
            )
            for g in res.groups
        )
    elif v == 4:
        groups = tuple(
            listed_cls(group_id=g.group_id, protocol_type=g.protocol_type, group_state=g.state)
            for g in res.groups
        )
    else:
        groups = tuple(
            listed_cls(group_id=g.group_id, protocol_type=g.protocol_type) for g in res.groups
        )
    if v >= 1:
        return mod.ListGroupsResponse(
            throttle_time=_ZERO_THROTTLE, error_code=res.error, groups=groups
        )
    return mod.ListGroupsResponse(error_code=res.error, groups=groups)


def _delete_groups_response(v: int, res: m.DeleteGroupsResult) -> object:
    mod = _response_module(DELETE_GROUPS, v)
    result_cls = mod.DeletableGroupResult
    results = tuple(result_cls(group_id=x.group_id, error_code=x.error) for x in res.results)
    return mod.DeleteGroupsResponse(throttle_time=_ZERO_THROTTLE, results=results)


_TO_RESPONSE: Final[dict[type, tuple[int, Callable[[int, Any], object]]]] = {
    m.JoinGroupResult: (JOIN_GROUP, _join_group_response),
    m.SyncGroupResult: (SYNC_GROUP, _sync_group_response),
    m.HeartbeatResult: (HEARTBEAT, _heartbeat_response),
    m.LeaveGroupResult: (LEAVE_GROUP, _leave_group_response),
    m.OffsetCommitResult: (OFFSET_COMMIT, _offset_commit_response),
    m.OffsetFetchResult: (OFFSET_FETCH, _offset_fetch_response),
    m.OffsetDeleteResult: (OFFSET_DELETE, _offset_delete_response),
    m.DescribeGroupsResult: (DESCRIBE_GROUPS, _describe_groups_response),
    m.ListGroupsResult: (LIST_GROUPS, _list_groups_response),
    m.DeleteGroupsResult: (DELETE_GROUPS, _delete_groups_response),
    **consumer_adapters.TO_RESPONSE,
    **share_adapters.TO_RESPONSE,
    **share_admin.TO_RESPONSE,
    **group_configs.TO_RESPONSE,
}


def response_frame(header: RequestHeader, result: AnyResult) -> bytes:
    """The response frame for `result`. The hot ones skip kio's pure-Python encoder: OffsetCommit
    and ConsumerGroupHeartbeat (every KIP-848 member's beat) are written by protocol.fastpath,
    byte for byte what kio writes (tests/protocol/test_fastpath.py)."""
    kind = type(result)
    if kind is m.OffsetCommitResult:
        return fastpath.offset_commit_response_frame(
            header.api_version,
            header.correlation_id,
            result.topics,  # type: ignore[union-attr,arg-type]
        )
    if (
        kind is consumer_adapters.HeartbeatResponse
        and header.api_key == apis.CONSUMER_GROUP_HEARTBEAT
    ):
        return consumer_adapters.heartbeat_frame(header, result)  # type: ignore[arg-type]
    return codec.encode_response(header, to_response(header, result))


def to_response(header: RequestHeader, result: AnyResult) -> object:
    """The kio response of the request's version for `result`."""
    api_key, convert = _TO_RESPONSE[type(result)]
    if api_key != header.api_key:
        raise TypeError(f"{type(result).__name__} does not answer api {header.api_key}")
    return convert(header.api_version, result)


# --------------------------------------------------------------------------------------------------
# One error for a whole request


def _error_result(header: RequestHeader, r: Any, error: ErrorCode) -> AnyResult:
    v = header.api_version
    match header.api_key:
        case apis.CONSUMER_GROUP_HEARTBEAT | apis.CONSUMER_GROUP_DESCRIBE:
            return consumer_adapters.error_result(header, r, error)
        case apis.SHARE_GROUP_HEARTBEAT | apis.SHARE_GROUP_DESCRIBE:
            return share_adapters.error_result(header, r, error)
        case apis.DESCRIBE_SHARE_GROUP_OFFSETS | apis.ALTER_SHARE_GROUP_OFFSETS:
            return share_admin.error_result(header, r, error)
        case apis.DELETE_SHARE_GROUP_OFFSETS:
            return share_admin.error_result(header, r, error)
        case apis.DESCRIBE_CONFIGS | apis.INCREMENTAL_ALTER_CONFIGS:
            return group_configs.error_result(header, r, error)
        case apis.JOIN_GROUP:  # JoinGroup: echo the member id so a known member keeps it
            return m.JoinGroupResult(error=error, member_id=r.member_id)
        case apis.SYNC_GROUP:
            return m.SyncGroupResult(error=error)
        case apis.HEARTBEAT:
            return m.HeartbeatResult(error=error)
        case apis.LEAVE_GROUP:
            return m.LeaveGroupResult(error=error)
        case apis.OFFSET_COMMIT:  # no top-level error: every partition carries it
            fast = isinstance(r, m.OffsetCommit)  # the fast path keeps the command, not kio's
            return m.OffsetCommitResult(
                tuple(
                    m.TopicErrors(
                        t.name,
                        tuple(
                            m.PartitionError(p.partition if fast else p.partition_index, error)
                            for p in t.partitions
                        ),
                    )
                    for t in r.topics
                )
            )
        case apis.OFFSET_FETCH:
            return _offset_fetch_error(v, r, error)
        case apis.OFFSET_DELETE:
            return m.OffsetDeleteResult(error=error)
        case apis.DESCRIBE_GROUPS:
            return m.DescribeGroupsResult(
                tuple(m.DescribedGroup(error, g, "", "", "", ()) for g in r.groups)
            )
        case apis.LIST_GROUPS:
            return m.ListGroupsResult(error=error, groups=())
        case apis.DELETE_GROUPS:
            return m.DeleteGroupsResult(tuple(m.DeletedGroup(g, error) for g in r.groups_names))
    raise ValueError(f"api {header.api_key} is not a group API")


def _offset_fetch_error(v: int, r: Any, error: ErrorCode) -> m.OffsetFetchResult:
    if v >= 8:
        return m.OffsetFetchResult(tuple(m.FetchedGroup(g.group_id, error, ()) for g in r.groups))
    if v >= 2:  # the top-level error, no partitions (OffsetFetchRequest `getErrorResponse`)
        return m.OffsetFetchResult((m.FetchedGroup(r.group_id, error, ()),))
    # v1: every requested partition carries the error (to_response fills offset -1 and "").
    topics = tuple(
        m.FetchedTopic(
            t.name, tuple(m.FetchedPartition(p, -1, -1, "", error) for p in t.partition_indexes)
        )
        for t in r.topics
    )
    return m.OffsetFetchResult((m.FetchedGroup(r.group_id, error, topics),))


class _JoinedAs:
    """All `error_response` needs of a JoinGroup: the member id it echoes."""

    __slots__ = ("member_id",)

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id


def error_context(header: RequestHeader, request: Any) -> object:
    """What `error_response` needs of `request`, to keep while it waits for its answer instead
    of the whole kio request. JoinGroup and SyncGroup stay parked for a whole rebalance: a join
    storm of 10,000 members held 10,000 decoded requests, and the holes they left in the
    allocator's pools kept ~0.5 KB a member of RSS after the storm (measured, issue 2)."""
    api_key = header.api_key
    if api_key == apis.JOIN_GROUP:
        return _JoinedAs(request.member_id)
    if api_key in _NO_ERROR_CONTEXT:
        return None
    return request


_NO_ERROR_CONTEXT = frozenset({apis.SYNC_GROUP, apis.HEARTBEAT, apis.LEAVE_GROUP})


def error_response(header: RequestHeader, request: object, error: ErrorCode) -> object:
    """The kio response answering `request` (of any group API and version) with `error`."""
    return to_response(header, _error_result(header, request, error))

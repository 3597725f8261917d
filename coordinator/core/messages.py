"""Version-neutral commands and results: the contract between the wire and the core.

`coordinator.serve.adapters` turns a decoded kio request of any version into one of these commands
and a result back into the kio response of the request's version. The core (`core.coordinator`)
only ever sees these types, so it needs no knowledge of wire versions beyond the few behaviours
Kafka ties to a version; those commands carry `api_version`.

Invariants:
- Field names are Kafka's (`member_id`, `generation_id`, `group_instance_id`), units in names.
- Every value is frozen; sequences are tuples.
- Errors are `ErrorCode` values (kio's enum of Kafka's codes), never exceptions.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from protocol.frozen import fast_init

__all__ = ["ErrorCode"]

# --------------------------------------------------------------------------------------------------
# JoinGroup (11)


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroup:
    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int  # v0: the adapter copies session_timeout_ms here, as Kafka does
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: tuple[Protocol, ...]  # in the member's order of preference
    reason: str | None
    client_id: str
    client_host: str  # "/" + IP literal, as Java's InetAddress.toString()
    api_version: int


@dataclass(frozen=True, slots=True)
class JoinGroupMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    error: ErrorCode
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None  # the adapter maps None to "" for v<7
    leader: str = ""
    skip_assignment: bool = False
    member_id: str = ""
    members: tuple[JoinGroupMember, ...] = ()


# --------------------------------------------------------------------------------------------------
# SyncGroup (14)


@dataclass(frozen=True, slots=True)
class SyncAssignment:
    member_id: str
    assignment: bytes


@dataclass(frozen=True, slots=True)
class SyncGroup:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: tuple[SyncAssignment, ...]
    api_version: int


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


# --------------------------------------------------------------------------------------------------
# Heartbeat (12)


@fast_init
@dataclass(frozen=True, slots=True)
class Heartbeat:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None


@fast_init
@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode


# --------------------------------------------------------------------------------------------------
# LeaveGroup (13)


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveGroup:
    group_id: str
    members: tuple[LeavingMember, ...]  # v0-2: the adapter makes a one-element list
    api_version: int


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    error: ErrorCode
    members: tuple[LeftMember, ...] = ()


# --------------------------------------------------------------------------------------------------
# OffsetCommit (8)


@fast_init
@dataclass(frozen=True, slots=True)
class CommitPartition:
    partition: int
    offset: int
    leader_epoch: int  # -1 = none
    metadata: str | None


@fast_init
@dataclass(frozen=True, slots=True)
class CommitTopic:
    name: str
    partitions: tuple[CommitPartition, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class OffsetCommit:
    group_id: str
    generation_id: int  # GenerationIdOrMemberEpoch; -1 = simple (admin) commit
    member_id: str
    group_instance_id: str | None
    retention_time_ms: int  # v2-4 only; -1 = broker default
    topics: tuple[CommitTopic, ...]
    api_version: int


@fast_init
@dataclass(frozen=True, slots=True)
class PartitionError:
    partition: int
    error: ErrorCode


@fast_init
@dataclass(frozen=True, slots=True)
class TopicErrors:
    name: str
    partitions: tuple[PartitionError, ...]


@fast_init
@dataclass(frozen=True, slots=True)
class OffsetCommitResult:
    topics: tuple[TopicErrors, ...]


# --------------------------------------------------------------------------------------------------
# OffsetFetch (9)


@dataclass(frozen=True, slots=True)
class FetchTopic:
    name: str
    partitions: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class FetchGroup:
    group_id: str
    topics: tuple[FetchTopic, ...] | None  # None = all topics the group has offsets for
    # v9+ (KIP-848): checked for consumer groups' members only; classic groups ignore them.
    member_id: str | None = None
    member_epoch: int = -1


@dataclass(frozen=True, slots=True)
class OffsetFetch:
    groups: tuple[FetchGroup, ...]  # v1-7: exactly one
    require_stable: bool
    api_version: int


@dataclass(frozen=True, slots=True)
class FetchedPartition:
    partition: int
    offset: int  # -1 = none committed
    leader_epoch: int  # -1 = none
    metadata: str
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class FetchedTopic:
    name: str
    partitions: tuple[FetchedPartition, ...]


@dataclass(frozen=True, slots=True)
class FetchedGroup:
    group_id: str
    error: ErrorCode
    topics: tuple[FetchedTopic, ...]


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    groups: tuple[FetchedGroup, ...]


# --------------------------------------------------------------------------------------------------
# OffsetDelete (47)


@dataclass(frozen=True, slots=True)
class OffsetDelete:
    group_id: str
    topics: tuple[FetchTopic, ...]


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error: ErrorCode
    topics: tuple[TopicErrors, ...] = ()


# --------------------------------------------------------------------------------------------------
# DescribeGroups (15), ListGroups (16), DeleteGroups (42)


@dataclass(frozen=True, slots=True)
class DescribeGroups:
    group_ids: tuple[str, ...]
    api_version: int


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    error: ErrorCode
    group_id: str
    state: str  # "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"
    protocol_type: str
    protocol_data: str
    members: tuple[DescribedMember, ...]
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class DescribeGroupsResult:
    groups: tuple[DescribedGroup, ...]


@dataclass(frozen=True, slots=True)
class ListGroups:
    states_filter: tuple[str, ...]  # empty = no filter
    types_filter: tuple[str, ...]  # empty = no filter


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    state: str
    group_type: str  # "classic", or "consumer" for a KIP-848 group


@dataclass(frozen=True, slots=True)
class ListGroupsResult:
    error: ErrorCode
    groups: tuple[ListedGroup, ...]


@dataclass(frozen=True, slots=True)
class DeleteGroups:
    group_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class DeletedGroup:
    group_id: str
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class DeleteGroupsResult:
    results: tuple[DeletedGroup, ...]


Command = (
    JoinGroup
    | SyncGroup
    | Heartbeat
    | LeaveGroup
    | OffsetCommit
    | OffsetFetch
    | OffsetDelete
    | DescribeGroups
    | ListGroups
    | DeleteGroups
)

Result = (
    JoinGroupResult
    | SyncGroupResult
    | HeartbeatResult
    | LeaveGroupResult
    | OffsetCommitResult
    | OffsetFetchResult
    | OffsetDeleteResult
    | DescribeGroupsResult
    | ListGroupsResult
    | DeleteGroupsResult
)

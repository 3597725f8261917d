"""What goes in and out of the consumer-group core: configuration, the ConsumerGroupHeartbeat
request and response (API 68, version-neutral), results, events and descriptions.

The request mirrors kio's `ConsumerGroupHeartbeatRequest` (v0 and v1 have the same fields; v1
only requires the client to generate the member id) with plain `int` milliseconds instead of
kio's timedelta types, plus what the request context gives Kafka (client id, client host, the
API version). Converting from and to kio's `consumer_group_heartbeat.v0/v1` classes is the
wiring's job (coordinator.serve.adapters), as for the classic APIs.

Errors are `ErrorCode` values in the response, never exceptions.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from coordinator.core.consumer.model import ConsumerGroupState, MemberState
from coordinator.core.consumer.records import ConsumerGroupRecord, TopicPartitions
from coordinator.core.messages import ErrorCode

__all__ = [
    "ConsumerEvent",
    "ConsumerGroupConfig",
    "ConsumerGroupDescribe",
    "ConsumerGroupDescribeResult",
    "ConsumerGroupDescription",
    "ConsumerGroupHeartbeat",
    "ConsumerMemberDescription",
    "ConsumerResult",
    "DescribedConsumerGroup",
    "GroupEpochBumped",
    "HeartbeatResponse",
    "MemberAdded",
    "MemberReconciled",
    "MemberRemoved",
    "RebalanceSettled",
    "TargetAssignmentComputed",
]


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """Kafka's group.consumer.* defaults (GroupCoordinatorConfig, 4.1). The server owns the
    session timeout and the heartbeat interval (KIP-848): clients only send their rebalance
    timeout (max.poll.interval.ms)."""

    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = ("uniform", "range")  # group.consumer.assignors; first = default
    topic_hash: str = "murmur3"  # KIP-1101 hash function (coordinator.core.topichash)
    # group.consumer.assignment.interval.ms (Kafka 4.3, KIP-1263): the target assignment is
    # computed at most once per interval; 0 computes it on every group epoch bump (Kafka 4.1).
    assignment_interval_ms: int = 0


@dataclass(frozen=True, slots=True)
class ConsumerGroupHeartbeat:
    group_id: str
    member_id: str  # "" only in v0, where the coordinator generates it
    member_epoch: int  # 0 join/rejoin; -1 leave; -2 a static member leaving for now
    instance_id: str | None = None  # null: not static, or unchanged since the last heartbeat
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1  # -1: unchanged
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    subscribed_topic_regex: str | None = None  # None: unchanged
    server_assignor: str | None = None  # None: unchanged (or the default)
    topic_partitions: tuple[TopicPartitions, ...] | None = None  # owned; None: unchanged
    client_id: str = ""
    client_host: str = ""  # "/" + IP literal, as Kafka's clientAddress().toString()
    api_version: int = 1


@dataclass(frozen=True, slots=True)
class HeartbeatResponse:
    error: ErrorCode
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: tuple[TopicPartitions, ...] | None = None  # None: unchanged, not sent


# -- events (metrics, history; past tense) ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberAdded:
    """A member id new to the group joined (a static member's new id included)."""

    group_id: str
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class GroupEpochBumped:
    """A new group epoch: a new target assignment is due, i.e. a rebalance started. `cause` is a
    coordinator.core.events.RebalanceCause value; the trigger is the member whose heartbeat,
    leave or expiry bumped it, or the `topics` whose metadata changed."""

    group_id: str
    group_epoch: int
    metadata_hash: int
    cause: str = "metadata_changed"
    member_id: str | None = None
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topics: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class TargetAssignmentComputed:
    group_id: str
    assignment_epoch: int
    assignor: str
    members: int
    changed_members: int


@dataclass(frozen=True, slots=True)
class MemberRemoved:
    group_id: str
    member_id: str
    reason: str  # "left", "session_expired", "rebalance_timeout", "static_replaced"
    instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class MemberReconciled:
    """A member reached the target assignment at the assignment epoch (STABLE), `reconcile_ms`
    after the rebalance it took part in started."""

    group_id: str
    member_id: str
    member_epoch: int
    reconcile_ms: int


@dataclass(frozen=True, slots=True)
class RebalanceSettled:
    """Every member is reconciled to the target assignment (the group is Stable), or the group
    emptied: the rebalance that started at `started_ms` (the first epoch bump since the last
    settling) is over. `bump` is the last epoch bump: its cause and trigger."""

    group_id: str
    group_epoch: int
    assignor: str
    members: int
    started_ms: int
    assigned_ms: int  # when the last target assignment was computed
    now_ms: int
    bump: GroupEpochBumped


ConsumerEvent = (
    MemberAdded
    | GroupEpochBumped
    | TargetAssignmentComputed
    | MemberRemoved
    | MemberReconciled
    | RebalanceSettled
)


@dataclass(frozen=True, slots=True)
class ConsumerResult:
    """One call's outcome: the reply (None for timers), then the records it depends on (Kafka's
    CoordinatorResult: the reply leaves only once they are durable). The records are already
    applied to the live groups."""

    response: HeartbeatResponse | None
    records: tuple[ConsumerGroupRecord, ...] = ()
    events: tuple[ConsumerEvent, ...] = ()


# -- ConsumerGroupDescribe (API 69) / DescribeGroups / ListGroups --------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerMemberDescription:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    member_state: MemberState
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: tuple[TopicPartitions, ...]
    target_assignment: tuple[TopicPartitions, ...]
    classic: bool = False  # a classic-protocol member (ConsumerGroupDescribe v1 MemberType 0)


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    group_id: str
    state: ConsumerGroupState
    group_epoch: int
    assignment_epoch: int
    assignor_name: str
    members: tuple[ConsumerMemberDescription, ...]


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribe:
    """ConsumerGroupDescribe (API 69), version-neutral."""

    group_ids: tuple[str, ...]
    api_version: int = 0


@dataclass(frozen=True, slots=True)
class DescribedConsumerGroup:
    group_id: str
    error: ErrorCode
    error_message: str | None = None
    description: ConsumerGroupDescription | None = None  # None with an error
    # The names of the topic ids in the members' assignments (the catalog's; ids it no longer
    # knows are left out of the answer, as Kafka does).
    topic_names: tuple[tuple[uuid.UUID, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescribeResult:
    groups: tuple[DescribedConsumerGroup, ...]

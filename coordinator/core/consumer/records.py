"""The KIP-848 consumer-group records: what a consumer group persists, as plain key/value types.

Kafka's `ConsumerGroup*Key/Value` coordinator records (group-coordinator/src/main/resources/
common/message/, Kafka 4.1), field for field, with Kafka's record type numbers in
`RECORD_TYPES` (the key's "apiKey", which `__consumer_offsets` writes as the key's version):

    3  ConsumerGroupMetadata                 group epoch + KIP-1101 metadata hash (tagged field 0)
    4  ConsumerGroupPartitionMetadata        pre-4.1 subscription metadata: only read (as a flag)
                                             and deleted; 4.1 replaced it with the metadata hash
    5  ConsumerGroupMemberMetadata           a member's subscription and client metadata
    6  ConsumerGroupTargetAssignmentMetadata the target assignment epoch
    7  ConsumerGroupTargetAssignmentMember   a member's target assignment
    8  ConsumerGroupCurrentMemberAssignment  a member's epochs, state and current assignment
    16 ConsumerGroupRegularExpression        a regex's resolved topics

A value of None is a tombstone. `coordinator.core.consumer.replay` applies them; the coordinator
changes a group only by emitting these and replaying them, so replaying the log rebuilds
exactly the live groups.

Type 5 carries `ClassicMemberMetadata` (its tagged field 0) for a member that speaks the classic
protocol inside a consumer group (the online upgrade/downgrade, issue 23 item 6); None for a
consumer-protocol member. Deliberately left out (we never write them): the racks of type 4, and
the fields Kafka added after 4.1 (`AssignmentTimestamp` of type 6 and `AssignmentEpochs` of type
8, both tagged, so a 4.1 reader skips them too).

Pure: no I/O.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from protocol.frozen import fast_init

__all__ = [
    "RECORD_TYPES",
    "ClassicMemberMetadata",
    "ClassicProtocol",
    "ConsumerGroupCurrentMemberAssignmentKey",
    "ConsumerGroupCurrentMemberAssignmentValue",
    "ConsumerGroupKey",
    "ConsumerGroupMemberMetadataKey",
    "ConsumerGroupMemberMetadataValue",
    "ConsumerGroupMetadataKey",
    "ConsumerGroupMetadataValue",
    "ConsumerGroupPartitionMetadataKey",
    "ConsumerGroupPartitionMetadataValue",
    "ConsumerGroupRecord",
    "ConsumerGroupRegularExpressionKey",
    "ConsumerGroupRegularExpressionValue",
    "ConsumerGroupTargetAssignmentMemberKey",
    "ConsumerGroupTargetAssignmentMemberValue",
    "ConsumerGroupTargetAssignmentMetadataKey",
    "ConsumerGroupTargetAssignmentMetadataValue",
    "ConsumerGroupValue",
    "PartitionMetadataTopic",
    "TopicPartitions",
]


@fast_init
@dataclass(frozen=True, slots=True)
class TopicPartitions:
    """One topic's partitions, by topic id; partitions ascending (our canonical order)."""

    topic_id: uuid.UUID
    partitions: tuple[int, ...]


# -- 3: group epoch and metadata hash ----------------------------------------------------------


@fast_init
@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadataValue:
    epoch: int
    metadata_hash: int = 0  # KIP-1101, Kafka 4.1: tagged field 0, default 0


# -- 4: pre-4.1 subscription metadata (read as a flag, then deleted) -----------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class PartitionMetadataTopic:
    topic_id: uuid.UUID
    topic_name: str
    num_partitions: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupPartitionMetadataValue:
    """Never written by groupcoord; a replayed one flags the group so that its next metadata
    update writes the tombstone (Kafka 4.1, GroupMetadataManager.updateSubscriptionMetadata)."""

    topics: tuple[PartitionMetadataTopic, ...] = ()


# -- 5: member subscription ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataKey:
    group_id: str
    member_id: str


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    """One protocol a classic member listed in its JoinGroup: its name and metadata (the
    ConsumerProtocolSubscription bytes)."""

    name: str
    metadata: bytes


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """Tagged field 0 of type 5: a member using the classic protocol (JoinGroup/SyncGroup/
    Heartbeat) inside a consumer group, with its own session timeout."""

    session_timeout_ms: int
    supported_protocols: tuple[ClassicProtocol, ...]  # in the member's order of preference


@dataclass(frozen=True, slots=True)
class ConsumerGroupMemberMetadataValue:
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]  # sorted (Kafka keeps a set; the order is ours)
    subscribed_topic_regex: str | None
    rebalance_timeout_ms: int
    server_assignor: str | None
    classic_member_metadata: ClassicMemberMetadata | None = None  # tagged field 0


# -- 6 and 7: target assignment ------------------------------------------------------------------


@fast_init
@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataKey:
    group_id: str


@fast_init
@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMetadataValue:
    assignment_epoch: int


@fast_init
@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberKey:
    group_id: str
    member_id: str


@fast_init
@dataclass(frozen=True, slots=True)
class ConsumerGroupTargetAssignmentMemberValue:
    topic_partitions: tuple[TopicPartitions, ...]


# -- 8: current member assignment -----------------------------------------------------------------


@fast_init
@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentKey:
    group_id: str
    member_id: str


@fast_init
@dataclass(frozen=True, slots=True)
class ConsumerGroupCurrentMemberAssignmentValue:
    member_epoch: int
    previous_member_epoch: int
    state: int  # MemberState's byte: 0 stable, 1 unrevoked, 2 unreleased
    assigned_partitions: tuple[TopicPartitions, ...]
    partitions_pending_revocation: tuple[TopicPartitions, ...]


# -- 16: resolved regular expression ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionKey:
    group_id: str
    regular_expression: str


@dataclass(frozen=True, slots=True)
class ConsumerGroupRegularExpressionValue:
    topics: tuple[str, ...]  # sorted
    version: int  # Kafka: the metadata image offset; ours: the topic catalog's change count
    timestamp_ms: int  # wall clock, epoch ms


ConsumerGroupKey = (
    ConsumerGroupMetadataKey
    | ConsumerGroupPartitionMetadataKey
    | ConsumerGroupMemberMetadataKey
    | ConsumerGroupTargetAssignmentMetadataKey
    | ConsumerGroupTargetAssignmentMemberKey
    | ConsumerGroupCurrentMemberAssignmentKey
    | ConsumerGroupRegularExpressionKey
)
ConsumerGroupValue = (
    ConsumerGroupMetadataValue
    | ConsumerGroupPartitionMetadataValue
    | ConsumerGroupMemberMetadataValue
    | ConsumerGroupTargetAssignmentMetadataValue
    | ConsumerGroupTargetAssignmentMemberValue
    | ConsumerGroupCurrentMemberAssignmentValue
    | ConsumerGroupRegularExpressionValue
)

# Kafka's record type ("apiKey" of the key schema) per key type: what the codec writes as the
# key version in `__consumer_offsets`, and what coordinator.core.record_codec must map back.
RECORD_TYPES: dict[type, int] = {
    ConsumerGroupMetadataKey: 3,
    ConsumerGroupPartitionMetadataKey: 4,
    ConsumerGroupMemberMetadataKey: 5,
    ConsumerGroupTargetAssignmentMetadataKey: 6,
    ConsumerGroupTargetAssignmentMemberKey: 7,
    ConsumerGroupCurrentMemberAssignmentKey: 8,
    ConsumerGroupRegularExpressionKey: 16,
}


@fast_init
@dataclass(frozen=True, slots=True)
class ConsumerGroupRecord:
    """A key and its value (None = tombstone): the same shape as core.records.Record."""

    key: ConsumerGroupKey
    value: ConsumerGroupValue | None

    @property
    def record_type(self) -> int:
        return RECORD_TYPES[type(self.key)]

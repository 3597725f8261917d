"""What the coordinator persists: key/value records modelled on Kafka's `__consumer_offsets`.

A record is a key and a value; a value of None is a tombstone. Keys are designed for compaction,
as Kafka's are: one key per group (its latest full snapshot wins) and one per
(group, topic, partition) offset. Replaying the records in order rebuilds the durable state
(docs/protocol.md §12.3): a GroupMetadata value with members restores a Stable group, one without
members an Empty group; an offset value replaces the previous one; tombstones delete.

This module is pure: the byte encoding for the log lives beside the types (`storage` frames them).
"""

from __future__ import annotations

from dataclasses import dataclass

from coordinator.core.consumer.records import ConsumerGroupKey, ConsumerGroupValue
from coordinator.core.share.group_configs import GroupConfigKey, GroupConfigValue
from coordinator.core.share.records import ShareGroupKey, ShareGroupValue
from coordinator.core.share.state_records import SharePartitionStateKey, SharePartitionStateValue
from protocol.frozen import fast_init


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group_id: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the selected protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str  # "" = none (simple group)
    generation_id: int
    protocol_name: str | None
    leader: str | None
    current_state_timestamp_ms: int  # wall clock, epoch ms; -1 = none
    members: tuple[MemberMetadata, ...]
    metadata_hash: int = 0  # KIP-1101 group metadata hash (filled in by the topic-hash work)


@fast_init
@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group_id: str
    topic: str
    partition: int


@fast_init
@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int  # -1 = none
    metadata: str
    commit_timestamp_ms: int  # wall clock, epoch ms
    expire_timestamp_ms: int | None  # only for v2-4 commits with an explicit retention


@dataclass(frozen=True, slots=True)
class TopicKey:
    """groupcoord's own record (type >= 100): a topic of the catalog (coordinator.core.topics)."""

    name: str


@dataclass(frozen=True, slots=True)
class TopicValue:
    topic_id: bytes  # the 16 bytes of the Kafka Uuid (msb then lsb, big-endian)
    partitions: int
    racks: tuple[tuple[str, ...], ...]  # per partition, the replicas' racks; () = unknown


@dataclass(frozen=True, slots=True)
class AclKey:
    """groupcoord's own record (type 101): one ACL binding (coordinator.security.acl), Kafka's
    wire codes for the enums. The key is the whole binding, so compaction keeps one record per
    ACL; a tombstone deletes it (DeleteAcls)."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


@dataclass(frozen=True, slots=True)
class AclValue:
    """The ACL exists (no fields yet: a version for what may come)."""


@dataclass(frozen=True, slots=True)
class ScramCredentialKey:
    """groupcoord's own record (type 102): a user's credential for one SCRAM mechanism
    (coordinator.security.sasl; Kafka's KIP-554 mechanism codes: 1 SHA-256, 2 SHA-512)."""

    user: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ScramCredentialValue:
    """Salted only, as Kafka stores SCRAM credentials: never the password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class TxnOffsetKey:
    """groupcoord's own record (type 103): one pending transactional offset (issue 29,
    coordinator.core.txn_offsets), staged by a TxnOffsetCommit and not yet resolved by its
    transaction's outcome. `seq` tells apart a producer's stagings for one partition (a producer
    id keeps its epoch across transactions, so a second transaction may stage before the first
    one is resolved); resolving writes a tombstone for each key it settles."""

    group_id: str
    topic: str
    partition: int
    producer_id: int
    seq: int


@dataclass(frozen=True, slots=True)
class TxnOffsetValue:
    transactional_id: str
    producer_epoch: int
    offset: int
    leader_epoch: int  # -1 = none
    metadata: str
    commit_timestamp_ms: int  # wall clock, epoch ms: when it was staged


SecurityKey = AclKey | ScramCredentialKey
GroupKey = GroupMetadataKey | OffsetCommitKey
# The KIP-848 consumer-group records (types 3-8, 16) are coordinator.core.consumer.records';
# the KIP-932 share-group records (types 10-14) coordinator.core.share.records', and the share
# partitions' state (groupcoord's type 104) coordinator.core.share.state_records'.
RecordKey = (
    GroupMetadataKey
    | OffsetCommitKey
    | TopicKey
    | AclKey
    | ScramCredentialKey
    | TxnOffsetKey
    | ConsumerGroupKey
    | ShareGroupKey
    | SharePartitionStateKey
    | GroupConfigKey
)
RecordValue = (
    GroupMetadataValue
    | OffsetCommitValue
    | TopicValue
    | AclValue
    | ScramCredentialValue
    | TxnOffsetValue
    | ConsumerGroupValue
    | ShareGroupValue
    | SharePartitionStateValue
    | GroupConfigValue
)


@fast_init
@dataclass(frozen=True, slots=True)
class Record:
    key: RecordKey
    value: RecordValue | None  # None = tombstone

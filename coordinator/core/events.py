"""Things that happened inside the core, reported in Effects.events.

Metrics, logs and (later) the history log are fed from these; the core never imports
prometheus_client or logging handlers of its own. Names are in the past tense.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from protocol.frozen import fast_init


class RebalanceCause(enum.StrEnum):
    MEMBER_JOINED = "member_joined"
    MEMBER_LEFT = "member_left"
    SESSION_EXPIRED = "session_expired"
    # A subscribed topic changed (KIP-1101 applied to classic groups), by kind of change. The
    # coordinator starts the rebalance for all but TOPIC_DELETED, which labels the rebalance the
    # members start themselves once they notice (coordinator.core.topic_watch says why).
    PARTITIONS_ADDED = "partitions_added"
    RACKS_CHANGED = "racks_changed"
    TOPIC_CREATED = "topic_created"  # a subscribed topic that did not exist appeared
    TOPIC_RECREATED = "topic_recreated"  # deleted and created again under its name (a new id)
    TOPIC_DELETED = "topic_deleted"
    METADATA_CHANGED = "metadata_changed"  # changed while groupcoord was down: which way is unknown
    PROTOCOL_CHANGED = "protocol_changed"  # a member rejoined with different protocols
    LEADER_REJOINED = "leader_rejoined"
    SYNC_EXPIRED = "sync_expired"  # pending-sync timeout: members never sent SyncGroup
    STATIC_MEMBER_REPLACED = "static_member_replaced"
    GROUP_MAX_SIZE = "group_max_size"
    WRITE_FAILED = "write_failed"
    # KIP-848 consumer groups only (a group epoch bump is their rebalance, issue 23).
    SUBSCRIPTION_CHANGED = "subscription_changed"  # a member's topics, regex or assignor
    REBALANCE_TIMEOUT = "rebalance_timeout"  # a member did not revoke in its rebalance timeout


class LeaveReason(enum.StrEnum):
    LEFT = "left"  # LeaveGroup
    EXPIRED = "expired"  # session timeout
    FENCED = "fenced"  # static member replaced by a new member id
    NOT_REJOINED = "not_rejoined"  # dynamic member dropped at join completion
    SYNC_EXPIRED = "sync_expired"  # never sent SyncGroup
    MAX_SIZE = "max_size"
    REBALANCE_TIMEOUT = "rebalance_timeout"  # KIP-848: did not revoke partitions in time


@dataclass(frozen=True, slots=True)
class RebalanceTrigger:
    """Who or what started a rebalance, as the status page, /groups and the history show it.

    A member's own action (join, leave, rejoin, static replacement) and a member's expiry name that
    member: its id, instance id, client id and host, as they were when it acted (a member that left
    or expired is gone from the group by the time anyone reads this). A change of a subscribed
    topic names no member but the topics (`GroupMetadataHashChanged.topics`). NO_TRIGGER: nothing
    one can name (the group grew over its maximum size at load, or an old history entry)."""

    member_id: str | None = None
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    topics: tuple[str, ...] = ()


NO_TRIGGER = RebalanceTrigger()


@dataclass(frozen=True, slots=True)
class GroupCreated:
    group_id: str


@dataclass(frozen=True, slots=True)
class GroupDeleted:
    group_id: str


@dataclass(frozen=True, slots=True)
class MemberJoined:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class MemberLeft:
    group_id: str
    member_id: str
    group_instance_id: str | None
    reason: LeaveReason
    client_id: str = ""  # who it was, for the history log (coordinator/serve/history.py)
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class RebalanceStarted:
    group_id: str
    cause: RebalanceCause
    member_id: str | None  # the member that triggered it, if one did: `trigger.member_id`
    now_ms: int
    trigger: RebalanceTrigger = NO_TRIGGER


@dataclass(frozen=True, slots=True)
class JoinPhaseCompleted:
    group_id: str
    generation_id: int
    protocol_name: str | None
    members: int
    started_ms: int  # when PreparingRebalance was entered
    now_ms: int


@dataclass(frozen=True, slots=True)
class RebalanceCompleted:
    """The group reached Stable (or Empty) after a rebalance."""

    group_id: str
    generation_id: int
    protocol_name: str | None
    leader: str | None
    members: int
    cause: RebalanceCause
    started_ms: int
    join_completed_ms: int
    now_ms: int
    trigger: RebalanceTrigger = NO_TRIGGER  # of the (last) RebalanceStarted this one completes
    # "consumer" for a KIP-848 group: its group epoch is the generation, its server assignor the
    # protocol, no leader; the join phase ends when the target assignment was computed, the
    # rest is the members' reconciliation (issue 23).
    group_type: str = "classic"


@dataclass(frozen=True, slots=True)
class MemberReconciled:
    """A KIP-848 consumer group's member reached its target assignment (issue 23):
    `reconcile_ms` after the rebalance started."""

    group_id: str
    member_id: str
    member_epoch: int
    reconcile_ms: int


@fast_init
@dataclass(frozen=True, slots=True)
class OffsetsCommitted:
    group_id: str
    partitions: int


@dataclass(frozen=True, slots=True)
class OffsetsExpired:
    group_id: str
    partitions: int


@dataclass(frozen=True, slots=True)
class OffsetsDeleted:
    group_id: str
    partitions: int


@dataclass(frozen=True, slots=True)
class GroupMetadataHashChanged:
    """A Stable or CompletingRebalance group's metadata hash (KIP-1101, core.topichash) no
    longer matches the one its generation was formed with; a rebalance with `cause` follows, the
    coordinator's own except for TOPIC_DELETED (see coordinator.core.topic_watch).
    `topics`: the topic whose change caused it; after a restart, every subscribed topic (the log
    keeps only the group's combined hash, so which one changed while it was down is unknown)."""

    group_id: str
    topics: tuple[str, ...]
    now_ms: int
    cause: RebalanceCause = RebalanceCause.METADATA_CHANGED


Event = (
    GroupCreated
    | GroupDeleted
    | MemberJoined
    | MemberLeft
    | RebalanceStarted
    | JoinPhaseCompleted
    | RebalanceCompleted
    | MemberReconciled
    | OffsetsCommitted
    | OffsetsExpired
    | OffsetsDeleted
    | GroupMetadataHashChanged
)

# The causes that are a change of a subscribed topic (groupcoord_topic_hash_rebalances counts them).
TOPIC_CAUSES = frozenset(
    {
        RebalanceCause.PARTITIONS_ADDED,
        RebalanceCause.RACKS_CHANGED,
        RebalanceCause.TOPIC_CREATED,
        RebalanceCause.TOPIC_RECREATED,
        RebalanceCause.TOPIC_DELETED,
        RebalanceCause.METADATA_CHANGED,
    }
)

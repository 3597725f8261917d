"""One KIP-848 consumer group and its members: Kafka 4.1's ConsumerGroup / ConsumerGroupMember.

A `ConsumerGroup` is changed only by `coordinator.core.consumer.replay` applying records (hard
state); the coordinator keeps its soft state (timers, refresh flags) beside it. Everything here
is bookkeeping: no decision about requests, time or replies.

Epochs (KIP-848):
- group epoch: bumped whenever the group's membership, a subscription, a resolved regex or the
  subscribed topics' metadata hash changes; it says "a new target assignment is due".
- assignment epoch: the group epoch the target assignment was computed for. group epoch >
  assignment epoch only inside a heartbeat (the target is recomputed at once): ASSIGNING.
- member epoch: the assignment epoch a member has reconciled to; its previous epoch is kept so
  a member whose response was lost may come back with it.

Invariants (checked by the tests after every step):
- `partition_epochs[t][p]` = the epoch of the member holding partition p of topic t, either
  assigned or pending revocation; no partition is held by two members (adding a partition that
  is held at an equal or greater epoch raises `IllegalConsumerState`, a bug, as Kafka's
  IllegalStateException).
- `static_members[instance_id]` = the member id holding that instance id.
- `topic_name_counts` / `regex_counts` count the members subscribing to each name / regex.
- Partition maps are canonical: no topic with an empty set; they are never mutated.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from coordinator.core.consumer.records import ClassicMemberMetadata, TopicPartitions
from protocol.frozen import fast_replace

__all__ = [
    "EMPTY_PARTITIONS",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "IllegalConsumerState",
    "MemberState",
    "PartitionMap",
    "ResolvedRegex",
    "SubscriptionType",
    "from_topic_partitions",
    "partition_count",
    "replace_member",
    "to_topic_partitions",
]

LEAVE_GROUP_MEMBER_EPOCH = -1  # ConsumerGroupHeartbeatRequest.LEAVE_GROUP_MEMBER_EPOCH
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2  # a static member leaving for now (it may come back)

PartitionMap = Mapping[uuid.UUID, frozenset[int]]
EMPTY_PARTITIONS: PartitionMap = MappingProxyType({})


class IllegalConsumerState(RuntimeError):
    """A record that contradicts the group (Kafka's IllegalStateException): a bug."""


class MemberState(enum.IntEnum):
    """Kafka's MemberState (its byte value is what record 8 stores)."""

    STABLE = 0
    """Reconciled with the target assignment at its epoch (or waiting for a newer one)."""
    UNREVOKED_PARTITIONS = 1
    """Must revoke partitions before moving to the next epoch; the rebalance timeout runs."""
    UNRELEASED_PARTITIONS = 2
    """At the target epoch, waiting for partitions other members have not released yet."""
    UNKNOWN = 127
    """A state written by a newer version: the member is fenced unless it owns nothing."""

    @classmethod
    def from_value(cls, value: int) -> MemberState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConsumerGroupState(enum.Enum):
    """Kafka's ConsumerGroup.ConsumerGroupState: derived from the group, never stored."""

    EMPTY = "Empty"  # no members
    ASSIGNING = "Assigning"  # group epoch > assignment epoch: a target assignment is due
    RECONCILING = "Reconciling"  # some member is not STABLE at the assignment epoch
    STABLE = "Stable"  # every member is STABLE at the assignment epoch
    DEAD = "Dead"  # deleted (or never existed): what describe/list report for it


class SubscriptionType(enum.Enum):
    HOMOGENEOUS = "homogeneous"  # every member subscribes to the same topics
    HETEROGENEOUS = "heterogeneous"


@dataclass(frozen=True, slots=True)
class ResolvedRegex:
    topics: frozenset[str]
    version: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class ConsumerGroupMember:
    """Kafka's ConsumerGroupMember with its Builder's defaults (a new member is epoch 0,
    previous epoch -1, STABLE, empty regex)."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str = ""  # "" = none (Kafka's default)
    server_assignor: str | None = None
    assigned_partitions: PartitionMap = field(default_factory=lambda: EMPTY_PARTITIONS)
    partitions_pending_revocation: PartitionMap = field(default_factory=lambda: EMPTY_PARTITIONS)
    # Set for a member speaking the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside the
    # consumer group: the online upgrade/downgrade (coordinator.core.consumer.classic).
    classic: ClassicMemberMetadata | None = None

    def is_reconciled_to(self, assignment_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == assignment_epoch

    def same_metadata(self, other: ConsumerGroupMember) -> bool:
        """What record 5 holds is equal (Kafka compares whole members; only these differ)."""
        return (
            self.instance_id == other.instance_id
            and self.rack_id == other.rack_id
            and self.rebalance_timeout_ms == other.rebalance_timeout_ms
            and self.client_id == other.client_id
            and self.client_host == other.client_host
            and self.subscribed_topic_names == other.subscribed_topic_names
            and self.subscribed_topic_regex == other.subscribed_topic_regex
            and self.server_assignor == other.server_assignor
            and self.classic == other.classic
        )


replace_member = fast_replace(ConsumerGroupMember)
"""`dataclasses.replace` for a member, without its per-call cost (protocol.frozen): a
reconciling heartbeat copies its member twice (reconciliation, then the record's replay)."""


def partition_count(partitions: PartitionMap) -> int:
    return sum(len(ps) for ps in partitions.values())


def to_topic_partitions(partitions: PartitionMap) -> tuple[TopicPartitions, ...]:
    """Canonical wire/record form: topics by id, partitions ascending."""
    if len(partitions) == 1:  # most members read one topic: no sort of the topics
        for tid, ps in partitions.items():
            return (TopicPartitions(tid, tuple(sorted(ps))),) if ps else ()
    return tuple(
        TopicPartitions(tid, tuple(sorted(ps)))
        for tid, ps in sorted(partitions.items(), key=lambda kv: kv[0].int)
        if ps
    )


def from_topic_partitions(tps: Iterable[TopicPartitions]) -> PartitionMap:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for tp in tps:
        if tp.partitions:
            out[tp.topic_id] = out.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    return MappingProxyType(out) if out else EMPTY_PARTITIONS


@dataclass(eq=False, slots=True)
class ConsumerGroup:
    """Kafka's ConsumerGroup (hard state only; see the module docstring for the invariants)."""

    group_id: str
    group_epoch: int = 0
    metadata_hash: int = 0
    assignment_epoch: int = 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    target_assignment: dict[str, PartitionMap] = field(default_factory=dict)
    # topic id -> partition -> member id, over the target assignment (the assignors' input)
    inverted_target: dict[uuid.UUID, dict[int, str]] = field(default_factory=dict)
    partition_epochs: dict[uuid.UUID, dict[int, int]] = field(default_factory=dict)
    resolved_regexes: dict[str, ResolvedRegex] = field(default_factory=dict)
    topic_name_counts: dict[str, int] = field(default_factory=dict)
    regex_counts: dict[str, int] = field(default_factory=dict)
    server_assignor_counts: dict[str, int] = field(default_factory=dict)
    has_subscription_metadata_record: bool = False
    # Derived, kept up to date by the mutations: how many members are reconciled to
    # `_reconciled_epoch` (None: to be counted again), so `state` is O(1) per heartbeat.
    _reconciled: int = field(default=0, init=False, repr=False)
    _reconciled_epoch: int | None = field(default=None, init=False, repr=False)

    # -- derived ----------------------------------------------------------------------------

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        epoch = self.assignment_epoch
        if self._reconciled_epoch != epoch:
            self._reconciled = sum(m.is_reconciled_to(epoch) for m in self.members.values())
            self._reconciled_epoch = epoch
        if self._reconciled == len(self.members):
            return ConsumerGroupState.STABLE
        return ConsumerGroupState.RECONCILING

    def _count_reconciled(self, member: ConsumerGroupMember, delta: int) -> None:
        epoch = self._reconciled_epoch
        if epoch is not None and member.is_reconciled_to(epoch):
            self._reconciled += delta

    def static_member(self, instance_id: str | None) -> ConsumerGroupMember | None:
        if instance_id is None:
            return None
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def current_partition_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The epoch of the member holding the partition, or -1 when it is free."""
        return self.partition_epochs.get(topic_id, {}).get(partition, -1)

    def subscribed_topic_names(self) -> set[str]:
        """By name and through the resolved regexes of the members (Kafka's
        subscribedTopicNames keys)."""
        names = set(self.topic_name_counts)
        for regex in self.regex_counts:
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None:
                names |= resolved.topics
        return names

    def member_topics(self, member: ConsumerGroupMember) -> frozenset[str]:
        """A member's subscription: its names, plus its regex's resolved topics."""
        regex = member.subscribed_topic_regex
        if regex:
            resolved = self.resolved_regexes.get(regex)
            if resolved is not None:
                return member.subscribed_topic_names | resolved.topics
        return member.subscribed_topic_names

    def subscription_type(self) -> SubscriptionType:
        """Kafka's ConsumerGroup.subscriptionType over the current members."""
        n = len(self.members)
        by_regex: dict[str, int] = {}
        for regex in self.regex_counts:
            resolved = self.resolved_regexes.get(regex)
            for topic in resolved.topics if resolved is not None else ():
                by_regex[topic] = by_regex.get(topic, 0) + 1
        if not self.regex_counts:
            homogeneous = all(c == n for c in self.topic_name_counts.values())
        elif len(self.regex_counts) == 1 and next(iter(self.regex_counts.values())) == n:
            homogeneous = not self.topic_name_counts and all(c == 1 for c in by_regex.values())
        else:
            homogeneous = False
        return SubscriptionType.HOMOGENEOUS if homogeneous else SubscriptionType.HETEROGENEOUS

    def preferred_server_assignor(self, configured: tuple[str, ...]) -> str:
        """The server assignor most members ask for, else the default (the first configured).
        Kafka breaks a tie by HashMap order; we break it by the configured order, then name."""
        if not self.server_assignor_counts:
            return configured[0]
        rank = {name: i for i, name in enumerate(configured)}
        return min(
            self.server_assignor_counts.items(),
            key=lambda kv: (-kv[1], rank.get(kv[0], len(rank)), kv[0]),
        )[0]

    # -- mutations (called by replay only) ---------------------------------------------------

    def update_member(self, new: ConsumerGroupMember) -> None:
        old = self.members.get(new.member_id)
        self.members[new.member_id] = new
        if old is not None:
            self._count(old, -1)
            self._count_reconciled(old, -1)
            self._remove_partition_epochs(old)
        self._count(new, +1)
        self._count_reconciled(new, +1)
        self._add_partition_epochs(new.assigned_partitions, new.member_epoch)
        self._add_partition_epochs(new.partitions_pending_revocation, new.member_epoch)
        if new.instance_id is not None:
            self.static_members[new.instance_id] = new.member_id

    def remove_member(self, member_id: str) -> None:
        old = self.members.pop(member_id, None)
        if old is None:
            return
        self._count(old, -1)
        self._count_reconciled(old, -1)
        self._remove_partition_epochs(old)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]

    def update_target(self, member_id: str, assignment: PartitionMap) -> None:
        self.remove_target(member_id)
        self.target_assignment[member_id] = assignment
        for tid, ps in assignment.items():
            owners = self.inverted_target.setdefault(tid, {})
            for p in ps:
                owners[p] = member_id

    def remove_target(self, member_id: str) -> None:
        old = self.target_assignment.pop(member_id, None)
        for tid, ps in (old or EMPTY_PARTITIONS).items():
            owners = self.inverted_target.get(tid)
            if owners is None:
                continue
            for p in ps:
                if owners.get(p) == member_id:
                    del owners[p]
            if not owners:
                del self.inverted_target[tid]

    def _count(self, member: ConsumerGroupMember, delta: int) -> None:
        for name in member.subscribed_topic_names:
            _bump(self.topic_name_counts, name, delta)
        if member.subscribed_topic_regex:
            _bump(self.regex_counts, member.subscribed_topic_regex, delta)
        if member.server_assignor is not None:
            _bump(self.server_assignor_counts, member.server_assignor, delta)

    def _remove_partition_epochs(self, member: ConsumerGroupMember) -> None:
        epoch = member.member_epoch
        for partitions in (member.assigned_partitions, member.partitions_pending_revocation):
            for tid, ps in partitions.items():
                held = self.partition_epochs.get(tid)
                if held is None:
                    continue
                for p in ps:
                    if held.get(p) == epoch:  # Kafka: only if still held at that epoch
                        del held[p]
                if not held:
                    del self.partition_epochs[tid]

    def _add_partition_epochs(self, partitions: PartitionMap, epoch: int) -> None:
        for tid, ps in partitions.items():
            held = self.partition_epochs.setdefault(tid, {})
            for p in ps:
                previous = held.get(p)
                if previous is not None and previous >= epoch:
                    raise IllegalConsumerState(
                        f"group {self.group_id!r}: cannot set the epoch of {tid}-{p} to {epoch}: "
                        f"still held at epoch {previous}"
                    )
                held[p] = epoch


def _bump(counts: dict[str, int], key: str, delta: int) -> None:
    value = counts.get(key, 0) + delta
    if value > 0:
        counts[key] = value
    else:
        counts.pop(key, None)

"""One classic consumer group: its state, its members, and the rules that only need the group.

Kafka's `ClassicGroup`, `ClassicGroupMember` and `ClassicGroupState` (docs/protocol.md §3, §4).
The coordinator (`core.handlers`, `core.rebalance`) drives it; this module decides nothing about
time or replies, it only keeps the group's bookkeeping consistent.

Invariants:
- `state` only moves along `GroupState.may_move_to`; anything else raises `IllegalStateTransition`
  (a bug, never a client error).
- `leader_id` is None exactly when `members` is empty, and is otherwise a key of `members`.
- `protocol_counts[name]` = number of members listing `name`; `static_members` maps every static
  member's instance id to its member id; `num_awaiting_join` = members with a parked JoinGroup.
- Member iteration order is insertion order (Python dicts), the "map order" Kafka's leader choice
  and JoinGroup member list use.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from coordinator.core.events import NO_TRIGGER, RebalanceCause
from coordinator.core.messages import ErrorCode, JoinGroupMember, Protocol
from protocol import consumer

CONSUMER_PROTOCOL_TYPE = "consumer"


class IllegalStateTransition(RuntimeError):
    """A transition Kafka's ClassicGroupState forbids: a bug in the coordinator."""


class GroupState(enum.Enum):
    """Kafka's ClassicGroupState. Each state says what it replies and where it may move."""

    EMPTY = "Empty"
    """No members (pending MEMBER_ID_REQUIRED members may exist). JoinGroup admits; SyncGroup
    and Heartbeat answer UNKNOWN_MEMBER_ID; OffsetCommit with generation -1 is accepted; the group
    may be deleted or expire. Moves to PreparingRebalance (first member added) or is removed."""

    PREPARING_REBALANCE = "PreparingRebalance"
    """Collecting JoinGroups: joins are parked; SyncGroup and Heartbeat answer
    REBALANCE_IN_PROGRESS; commits of the old generation are accepted. Moves to
    CompletingRebalance (join phase done with members) or Empty (done without members)."""

    COMPLETING_REBALANCE = "CompletingRebalance"
    """Waiting for the leader's assignment: SyncGroups are parked; Heartbeat answers NONE; commits
    answer REBALANCE_IN_PROGRESS. Moves to Stable (leader's SyncGroup) or PreparingRebalance."""

    STABLE = "Stable"
    """Assignment handed out: SyncGroup answers the stored assignment; Heartbeat NONE; commits are
    accepted. Moves to PreparingRebalance."""

    DEAD = "Dead"
    """Unloaded: everything answers COORDINATOR_NOT_AVAILABLE. Terminal. (This coordinator never
    unloads, so a live group is never Dead; the state exists for fidelity.)"""

    def may_move_to(self, target: GroupState) -> bool:
        return self in _PREDECESSORS[target]


_PREDECESSORS: dict[GroupState, frozenset[GroupState]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.EMPTY, GroupState.COMPLETING_REBALANCE, GroupState.STABLE}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(GroupState),
}


class Check(enum.Enum):
    """A point where a request's answer depends on its group's state (Kafka checks the group's
    state at two points: before it looks at the member, and once the member id, instance id and
    generation have passed)."""

    JOIN = "JoinGroup: before the member"
    SYNC = "SyncGroup: before the member"
    SYNC_MEMBER = "SyncGroup: a valid member of this generation and protocol"
    HEARTBEAT = "Heartbeat: before the member"
    HEARTBEAT_MEMBER = "Heartbeat: a valid member of this generation (its session is renewed)"
    LEAVE = "LeaveGroup: before the members"
    COMMIT = "OffsetCommit: before the member"
    COMMIT_MEMBER = "OffsetCommit: a valid member of this generation"
    COMMIT_SIMPLE = "OffsetCommit: generation -1, no member id, no instance id (admin or simple)"
    OFFSET_DELETE = "OffsetDelete: a group of a protocol type other than consumer"
    DELETE = "DeleteGroups"


E = ErrorCode
_G = GroupState
# What a request is answered at each check, by the state of its group (docs/protocol.md §5-§11,
# Kafka's ClassicGroup validate* methods). None: no error at this point; the request goes on (a
# JoinGroup is parked or starts a rebalance, a SyncGroup is answered or parked as its state says
# in core.handlers.sync, a Heartbeat is answered NONE). A Dead group is never live here (this
# coordinator never unloads one), but its row is Kafka's and is tested like the others.
# tests/core/test_state_replies.py drives every state x check through the handlers.
STATE_REPLIES: dict[GroupState, dict[Check, ErrorCode | None]] = {
    _G.EMPTY: {
        Check.JOIN: None,
        Check.SYNC: E.unknown_member_id,
        Check.SYNC_MEMBER: E.unknown_member_id,  # unreachable: an Empty group has no members
        Check.HEARTBEAT: E.unknown_member_id,
        Check.HEARTBEAT_MEMBER: E.unknown_member_id,  # unreachable, likewise
        Check.LEAVE: None,
        Check.COMMIT: None,
        Check.COMMIT_MEMBER: None,  # unreachable, likewise
        Check.COMMIT_SIMPLE: None,
        Check.OFFSET_DELETE: None,
        Check.DELETE: None,
    },
    _G.PREPARING_REBALANCE: {
        Check.JOIN: None,
        Check.SYNC: None,
        Check.SYNC_MEMBER: E.rebalance_in_progress,
        Check.HEARTBEAT: None,
        Check.HEARTBEAT_MEMBER: E.rebalance_in_progress,
        Check.LEAVE: None,
        Check.COMMIT: None,
        Check.COMMIT_MEMBER: None,  # the old generation's commits are accepted
        Check.COMMIT_SIMPLE: E.unknown_member_id,
        Check.OFFSET_DELETE: E.non_empty_group,
        Check.DELETE: E.non_empty_group,
    },
    _G.COMPLETING_REBALANCE: {
        Check.JOIN: None,
        Check.SYNC: None,
        Check.SYNC_MEMBER: None,  # parked until the leader's assignment is durable
        Check.HEARTBEAT: None,
        Check.HEARTBEAT_MEMBER: None,
        Check.LEAVE: None,
        Check.COMMIT: None,
        Check.COMMIT_MEMBER: E.rebalance_in_progress,
        Check.COMMIT_SIMPLE: E.unknown_member_id,
        Check.OFFSET_DELETE: E.non_empty_group,
        Check.DELETE: E.non_empty_group,
    },
    _G.STABLE: {
        Check.JOIN: None,
        Check.SYNC: None,
        Check.SYNC_MEMBER: None,  # answered at once with the stored assignment
        Check.HEARTBEAT: None,
        Check.HEARTBEAT_MEMBER: None,
        Check.LEAVE: None,
        Check.COMMIT: None,
        Check.COMMIT_MEMBER: None,
        Check.COMMIT_SIMPLE: E.unknown_member_id,
        Check.OFFSET_DELETE: E.non_empty_group,
        Check.DELETE: E.non_empty_group,
    },
    _G.DEAD: {
        Check.JOIN: E.coordinator_not_available,
        Check.SYNC: E.coordinator_not_available,
        Check.SYNC_MEMBER: E.coordinator_not_available,
        Check.HEARTBEAT: E.coordinator_not_available,
        Check.HEARTBEAT_MEMBER: E.coordinator_not_available,
        Check.LEAVE: E.coordinator_not_available,
        Check.COMMIT: E.coordinator_not_available,
        Check.COMMIT_MEMBER: E.coordinator_not_available,
        Check.COMMIT_SIMPLE: E.coordinator_not_available,
        Check.OFFSET_DELETE: E.group_id_not_found,
        Check.DELETE: E.group_id_not_found,
    },
}


class Member:
    """A classic group member. Mutable: the coordinator updates it in place (hot path)."""

    __slots__ = (
        "assignment",
        "client_host",
        "client_id",
        "deadline_ms",
        "group_instance_id",
        "is_new",
        "join_reply_to",
        "join_version",
        "member_id",
        "protocol_type",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
        "sync_reply_to",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        *,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: tuple[Protocol, ...],
        assignment: bytes = b"",
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.assignment = assignment
        self.join_reply_to: int | None = None  # parked JoinGroup
        self.join_version = 0  # api_version of the parked JoinGroup
        self.sync_reply_to: int | None = None  # parked SyncGroup
        self.is_new = False
        # Session deadline; 0 = not armed (a member protected by a parked request). The heap
        # entry that stands for it is the group's (coordinator.core.timers).
        self.deadline_ms = 0

    def metadata(self, protocol_name: str | None) -> bytes:
        for p in self.protocols:
            if p.name == protocol_name:
                return p.metadata
        return b""

    def matches(self, protocols: tuple[Protocol, ...]) -> bool:
        """Kafka's `matches`: same ordered list of (name, metadata)."""
        return self.protocols == protocols


class PendingMember:
    """A member id handed out with MEMBER_ID_REQUIRED, not yet joined (KIP-394)."""

    __slots__ = ("deadline_ms", "member_id")

    def __init__(self, member_id: str) -> None:
        self.member_id = member_id
        self.deadline_ms = 0


class ClassicGroup:
    __slots__ = (
        "generation_id",
        "group_id",
        "hashed_topics",
        "initial_delay_ms",
        "initial_remaining_ms",
        "join_completed_ms",
        "join_timer_seq",
        "leader_id",
        "members",
        "metadata_hash",
        "new_member_added",
        "num_awaiting_join",
        "pending_members",
        "pending_sync",
        "previous_state",
        "protocol_counts",
        "protocol_name",
        "protocol_type",
        "rebalance_cause",
        "rebalance_member",
        "rebalance_started_ms",
        "session_timer_at",
        "session_timer_seq",
        "state",
        "state_timestamp_ms",
        "static_members",
        "subscribed_topics",
        "sync_timer_generation",
        "sync_timer_seq",
        "topic_deleted_ms",
    )

    def __init__(self, group_id: str, state_timestamp_ms: int | None) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.previous_state = GroupState.DEAD
        self.state_timestamp_ms: int | None = state_timestamp_ms  # wall clock, epoch ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: dict[str, PendingMember] = {}
        self.pending_sync: set[str] = set()
        self.protocol_counts: dict[str, int] = {}
        self.num_awaiting_join = 0
        self.subscribed_topics: frozenset[str] | None = None
        # KIP-1101 (coordinator.core.topichash): the topics this group is indexed under, and the
        # metadata hash its current generation was formed with (0 = none / unknown).
        self.hashed_topics: frozenset[str] = frozenset()
        self.metadata_hash = 0
        self.new_member_added = False
        # Group timers: join (rebalance timeout or initial delay) and pending sync; seq 0 = none.
        self.join_timer_seq = 0
        self.initial_delay_ms = 0
        self.initial_remaining_ms = 0
        self.sync_timer_seq = 0
        self.sync_timer_generation = 0
        # One session entry for all members: due at (or before) the earliest armed deadline.
        self.session_timer_seq = 0
        self.session_timer_at = 0
        # For events/metrics.
        self.rebalance_cause = RebalanceCause.MEMBER_JOINED
        self.rebalance_member = NO_TRIGGER  # who or what started it (core.events)
        self.rebalance_started_ms = 0
        self.join_completed_ms = 0
        # When a subscribed topic was deleted and the members have not rebalanced since (None:
        # no such deletion): their own rejoin is then labelled TOPIC_DELETED (topic_watch).
        self.topic_deleted_ms: int | None = None

    # -- state -----------------------------------------------------------------------------------

    def transition_to(self, target: GroupState, wall_ms: int) -> None:
        if not self.state.may_move_to(target):
            raise IllegalStateTransition(
                f"group {self.group_id!r}: {self.state.value} -> {target.value}"
            )
        self.previous_state = self.state
        self.state = target
        self.state_timestamp_ms = wall_ms

    def in_state(self, *states: GroupState) -> bool:
        return self.state in states

    # -- members ---------------------------------------------------------------------------------

    def add(self, member: Member) -> None:
        """Kafka's `add`: a memberless group takes the first member's protocol type and leader."""
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        for p in member.protocols:
            self.protocol_counts[p.name] = self.protocol_counts.get(p.name, 0) + 1
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        if member.join_reply_to is not None:
            self.num_awaiting_join += 1
        if self.leader_id is None:
            self.leader_id = member.member_id

    def remove(self, member_id: str) -> Member | None:
        """Kafka's `remove`: drops the member; a removed leader is replaced by the next member.

        Parked requests are the caller's to answer (it knows which error applies)."""
        # Defensive, so equivalent under mutation: the one caller (rebalance.drop_member) passes a
        # joined member, and a pending id leaves pending_members when its member joins.
        self.pending_members.pop(member_id, None)  # pragma: no mutate
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._uncount(member.protocols)
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        if member.join_reply_to is not None:
            self.num_awaiting_join -= 1
        # Equivalent under mutation: every removal is followed by a rebalance, or happens in
        # PreparingRebalance, and both clear pending_sync.
        self.pending_sync.discard(member_id)  # pragma: no mutate
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def replace_static(self, old: Member, new_member_id: str) -> Member:
        """KIP-345: the same static member under a new id (keeps place, assignment, leadership)."""
        new = Member(
            new_member_id,
            old.group_instance_id,
            client_id=old.client_id,
            client_host=old.client_host,
            # Equivalent under mutation: the caller (handlers.join) sets the rebalance
            # timeout from the JoinGroup, and a member's protocol_type is read only by `add`.
            rebalance_timeout_ms=old.rebalance_timeout_ms,  # pragma: no mutate
            session_timeout_ms=old.session_timeout_ms,
            protocol_type=old.protocol_type,  # pragma: no mutate
            protocols=old.protocols,
            assignment=old.assignment,
        )
        # Rebuild the dict to keep the member's position (map order decides the next leader).
        self.members = {
            (new_member_id if k == old.member_id else k): (new if k == old.member_id else v)
            for k, v in self.members.items()
        }
        assert old.group_instance_id is not None
        self.static_members[old.group_instance_id] = new_member_id
        if self.leader_id == old.member_id:
            self.leader_id = new_member_id
        if old.member_id in self.pending_sync:
            self.pending_sync.discard(old.member_id)
            self.pending_sync.add(new_member_id)
        if old.join_reply_to is not None:
            self.num_awaiting_join -= 1
        return new

    def update_protocols(self, member: Member, protocols: tuple[Protocol, ...]) -> None:
        self._uncount(member.protocols)
        member.protocols = protocols
        for p in protocols:
            self.protocol_counts[p.name] = self.protocol_counts.get(p.name, 0) + 1

    def park_join(self, member: Member, reply_to: int | None, api_version: int) -> None:
        if member.join_reply_to is None and reply_to is not None:
            self.num_awaiting_join += 1
        elif member.join_reply_to is not None and reply_to is None:
            self.num_awaiting_join -= 1
        member.join_reply_to = reply_to
        member.join_version = api_version

    def _uncount(self, protocols: tuple[Protocol, ...]) -> None:
        counts = self.protocol_counts
        for p in protocols:
            n = counts[p.name] - 1
            if n:
                counts[p.name] = n
            else:
                del counts[p.name]

    def validate_member(self, member_id: str, group_instance_id: str | None) -> bool | None:
        """Kafka's `validateMember`: None = ok, False = UNKNOWN_MEMBER_ID, True = FENCED."""
        if group_instance_id is not None:
            known = self.static_members.get(group_instance_id)
            if known is None:
                return False
            if known != member_id:
                return True
        if member_id not in self.members:
            return False
        return None

    # -- derived values --------------------------------------------------------------------------

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self) -> bool:
        return self.num_awaiting_join == len(self.members) and not self.pending_members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def supports_protocols(self, protocol_type: str, names: tuple[str, ...]) -> bool:
        """Kafka's `supportsProtocols` (§5.3): Empty needs any type and protocol; otherwise the type
        must match and one requested name must be listed by every current member."""
        if self.state is GroupState.EMPTY:
            return protocol_type != "" and len(names) > 0
        n = len(self.members)
        counts = self.protocol_counts
        return self.protocol_type == protocol_type and any(counts.get(x, 0) == n for x in names)

    def select_protocol(self) -> str:
        """The protocol for the next generation (docs/protocol.md §5.5, seed 000 rolling upgrade).

        1. Candidates: names listed by every member.
        2. Each member votes for the first candidate in its own preference order.
        3. Most votes wins. Ties: lowest summed preference rank (sum over members of the name's
           index in that member's list), then the lexicographically smallest name.

        Why not Kafka's tie-break: Java takes the first maximum in HashMap iteration order, which is
        deterministic but meaningless; any candidate is valid for every member, so we choose a rule
        that can be reasoned about. The vote itself is Kafka's, so a rolling upgrade
        ([roundrobin, range] members beside [range] members) stays on range until every member
        lists roundrobin, then moves once the majority prefers it.
        """
        n = len(self.members)
        candidates = {name for name, c in self.protocol_counts.items() if c == n}
        if not candidates:
            raise RuntimeError(f"group {self.group_id!r}: no protocol shared by all members")
        votes: dict[str, int] = dict.fromkeys(candidates, 0)
        ranks: dict[str, int] = dict.fromkeys(candidates, 0)
        for member in self.members.values():
            voted = False
            for index, p in enumerate(member.protocols):
                if p.name in candidates:
                    if not voted:
                        votes[p.name] += 1
                        voted = True
                    ranks[p.name] += index
        return min(candidates, key=lambda name: (-votes[name], ranks[name], name))

    def join_members(self) -> tuple[JoinGroupMember, ...]:
        """The leader's member list: every member with its metadata for the selected protocol."""
        name = self.protocol_name
        return tuple(
            JoinGroupMember(m.member_id, m.group_instance_id, m.metadata(name))
            for m in self.members.values()
        )

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        """§10.5: union of the members' consumer-protocol topics; None = unknown."""
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            parsed = consumer.subscription_topics(m.metadata(self.protocol_name))
            if parsed is None:
                return None
            topics.update(parsed)
        return frozenset(topics)

    def is_subscribed_to_topic(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.protocol_type == CONSUMER_PROTOCOL_TYPE


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """Read-only view for the status page and metrics."""

    group_id: str
    state: str
    protocol_type: str
    protocol_name: str | None
    generation_id: int
    leader_id: str | None
    members: tuple[MemberSnapshot, ...]
    pending_members: int

    @staticmethod
    def of(group: ClassicGroup) -> GroupSnapshot:
        return GroupSnapshot(
            group.group_id,
            group.state.value,
            group.protocol_type or "",
            group.protocol_name,
            group.generation_id,
            group.leader_id,
            tuple(
                MemberSnapshot(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.assignment,
                )
                for m in group.members.values()
            ),
            len(group.pending_members),
        )

"""Server-side assignors `uniform` and `range`: Kafka 4.1's UniformAssignor and RangeAssignor.

An assignor maps a `GroupSpec` (each member's subscribed topic ids and current target
assignment; the subscription type) and the partition count of each subscribed topic to the new
target assignment. Both are pure and deterministic.

`uniform` (Kafka's default), balance first, then stickiness:
- homogeneous subscriptions (UniformHomogeneousAssignmentBuilder): quota = total / members, the
  first `total % members` members short of their quota may take one extra; each member keeps its
  current partitions up to its quota, the rest and every unowned partition are handed out to
  members below quota, in order.
- heterogeneous subscriptions (UniformHeterogeneousAssignmentBuilder): members keep their
  partitions of topics they still subscribe to; unowned partitions go, topic by topic (most
  partitions per subscriber first), to the least loaded subscriber; then partitions move from
  the most to the least loaded subscribers of each topic until no move improves balance
  (at most 16 rounds over the topics).
`range` (server side; not sticky, as Kafka's is not): members ordered by instance id (static
members first) then member id; each topic's partitions are cut into contiguous ranges, the first
`partitions % subscribers` members taking one extra. With homogeneous subscriptions and equal
partition counts this co-partitions the topics.

Where Kafka iterates a HashMap or HashSet (members, topics, a member's partitions), we iterate
in sorted order, so the result never depends on hashing. Topic ids compare as Kafka's
`Uuid.compareTo` (signed most- then least-significant halves).
Partitions at or beyond a topic's current partition count are dropped from current assignments
(Kafka never shrinks a topic; a recreated topic gets a new id, but a catalog may be edited).

Pure: no I/O.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

from coordinator.core.consumer.model import EMPTY_PARTITIONS, PartitionMap, SubscriptionType
from protocol.frozen import fast_init

__all__ = [
    "ASSIGNORS",
    "AssignorError",
    "GroupSpec",
    "MemberSpec",
    "PartitionAssignor",
    "RangeAssignor",
    "UniformAssignor",
    "kafka_uuid_key",
]

_MAX_ITERATIONS = 16  # UniformHeterogeneousAssignmentBuilder.MAX_ITERATION_COUNT


class AssignorError(RuntimeError):
    """Kafka's PartitionAssignorException: a bug or an inconsistent spec."""


@fast_init
@dataclass(frozen=True, slots=True)
class MemberSpec:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    subscribed_topic_ids: frozenset[uuid.UUID]  # existing topics only
    assignment: PartitionMap  # the member's current target assignment


@dataclass(frozen=True, slots=True)
class GroupSpec:
    members: Mapping[str, MemberSpec]
    subscription_type: SubscriptionType
    partition_counts: Mapping[uuid.UUID, int]  # every subscribed topic id -> partitions


class PartitionAssignor(Protocol):
    name: str

    def assign(self, spec: GroupSpec) -> dict[str, PartitionMap]: ...


def kafka_uuid_key(topic_id: uuid.UUID) -> tuple[int, int]:
    """Kafka's Uuid.compareTo order: signed msb, then signed lsb."""
    value = topic_id.int
    msb, lsb = value >> 64, value & ((1 << 64) - 1)
    return (msb - (1 << 64) if msb >> 63 else msb, lsb - (1 << 64) if lsb >> 63 else lsb)


def _freeze(assignment: dict[uuid.UUID, set[int]]) -> PartitionMap:
    out = {tid: frozenset(ps) for tid, ps in assignment.items() if ps}
    return MappingProxyType(out) if out else EMPTY_PARTITIONS


def _valid(spec: GroupSpec, tid: uuid.UUID, partitions: frozenset[int]) -> list[int]:
    count = spec.partition_counts.get(tid, 0)
    return sorted(p for p in partitions if 0 <= p < count)


# -- uniform ------------------------------------------------------------------------------------


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: GroupSpec) -> dict[str, PartitionMap]:
        if not spec.members:
            return {}
        if spec.subscription_type is SubscriptionType.HOMOGENEOUS:
            return _uniform_homogeneous(spec)
        return _UniformHeterogeneous(spec).build()


def _uniform_homogeneous(spec: GroupSpec) -> dict[str, PartitionMap]:
    """Linear in members + partitions, hashing each topic id once per member holding it (a
    UUID's hash is Python code): topics are indexed by their position in Kafka's order. A member
    whose target is unchanged gets its very PartitionMap back, so callers compare by identity."""
    member_ids = sorted(spec.members)
    topics = sorted(spec.members[member_ids[0]].subscribed_topic_ids, key=kafka_uuid_key)
    if not topics:
        return {}
    order = {tid: i for i, tid in enumerate(topics)}
    counts: list[int] = []
    for tid in topics:
        count = spec.partition_counts.get(tid)
        if count is None:
            raise AssignorError(f"members subscribe to topic {tid}, which does not exist")
        counts.append(count)
    owned, currents, intact = _holdings(spec, member_ids, order, counts)
    unassigned: list[tuple[int, int]] = [
        (t, p) for t, flags in enumerate(owned) for p in range(counts[t]) if not flags[p]
    ]
    n = len(member_ids)
    min_quota, extra_left = divmod(sum(counts), n)
    kept_all: list[dict[int, list[int]] | None] = []  # None: kept its whole current target
    unfilled: list[tuple[int, int]] = []
    for index in range(n):
        quota = min_quota
        has_extra = extra_left > 0
        if has_extra:
            quota += 1
        kept: dict[int, list[int]] = {}
        whole = intact[index]
        for t, ps in currents[index]:
            count = counts[t]
            for p in sorted(ps) if len(ps) > 1 else ps:
                if not 0 <= p < count:
                    continue
                if quota > 0:
                    quota -= 1
                    kept.setdefault(t, []).append(p)
                else:
                    whole = False
                    unassigned.append((t, p))
        # Give up the extra slot unless this member is one of the last members that must take
        # one for the extras to be placed at all.
        if quota > 0 and has_extra and n - index > extra_left:
            quota -= 1
            has_extra = False
        if quota > 0:
            unfilled.append((index, quota))
        if has_extra:
            extra_left -= 1
        kept_all.append(None if whole else kept)
    given: dict[int, list[tuple[int, int]]] = {}
    cursor = 0
    for index, quota in unfilled:
        take = unassigned[cursor : cursor + quota]
        cursor += len(take)
        if take:
            given[index] = take
    if cursor < len(unassigned):
        raise AssignorError("partitions were left unassigned")
    return _homogeneous_result(spec, member_ids, topics, currents, kept_all, given)


def _holdings(
    spec: GroupSpec, member_ids: list[str], order: dict[uuid.UUID, int], counts: list[int]
) -> tuple[list[bytearray], list[list[tuple[int, frozenset[int]]]], list[bool]]:
    """Per topic index, which partitions some current target holds; per member, its current
    target's subscribed topics (in topic order); per member, whether that target is intact (all
    subscribed, all in range)."""
    owned = [bytearray(count) for count in counts]
    currents: list[list[tuple[int, frozenset[int]]]] = []
    intact: list[bool] = []
    members = spec.members
    for mid in member_ids:
        assignment = members[mid].assignment
        if not assignment:
            currents.append([])
            intact.append(True)
            continue
        held: list[tuple[int, frozenset[int]]] = []
        whole = True
        for tid, ps in assignment.items():
            t = order.get(tid)
            if t is None:
                whole = False  # not subscribed any more: the whole topic goes
                continue
            flags, count = owned[t], counts[t]
            for p in ps:
                if 0 <= p < count:
                    flags[p] = 1
                else:
                    whole = False
            held.append((t, ps))
        held.sort()
        currents.append(held)
        intact.append(whole)
    return owned, currents, intact


def _homogeneous_result(
    spec: GroupSpec,
    member_ids: list[str],
    topics: list[uuid.UUID],
    currents: list[list[tuple[int, frozenset[int]]]],
    kept_all: list[dict[int, list[int]] | None],
    given: dict[int, list[tuple[int, int]]],
) -> dict[str, PartitionMap]:
    result: dict[str, PartitionMap] = {}
    for index, mid in enumerate(member_ids):
        kept_or_none = kept_all[index]
        extra = given.get(index)
        if kept_or_none is None and extra is None:
            result[mid] = spec.members[mid].assignment
            continue
        if kept_or_none is None and not currents[index] and extra is not None and len(extra) == 1:
            t, p = extra[0]  # the common case of a fresh member: one partition
            result[mid] = MappingProxyType({topics[t]: frozenset((p,))})
            continue
        out: dict[uuid.UUID, set[int]] = {}
        if kept_or_none is None:
            for t, ps in currents[index]:
                out[topics[t]] = set(ps)
        else:
            for t, kept_ps in kept_or_none.items():
                out[topics[t]] = set(kept_ps)
        for t, p in extra or ():
            out.setdefault(topics[t], set()).add(p)
        result[mid] = _freeze(out)
    return result


class _UniformHeterogeneous:
    """UniformHeterogeneousAssignmentBuilder, with its MemberAssignmentBalancer inlined as
    sorted lists (the same picks: least loaded first, ties by member index)."""

    def __init__(self, spec: GroupSpec) -> None:
        self.spec = spec
        self.member_ids = sorted(spec.members)
        self.subscribers: dict[uuid.UUID, list[int]] = {}
        for index, mid in enumerate(self.member_ids):
            for tid in sorted(spec.members[mid].subscribed_topic_ids, key=kafka_uuid_key):
                if tid not in spec.partition_counts:
                    raise AssignorError(f"members subscribe to topic {tid}, which does not exist")
                self.subscribers.setdefault(tid, []).append(index)
        self.sizes = [0] * len(self.member_ids)
        self.owners = {tid: [-1] * spec.partition_counts[tid] for tid in self.subscribers}
        self.assignment: list[dict[uuid.UUID, set[int]]] = [{} for _ in self.member_ids]

    def _topic_order(self, tid: uuid.UUID) -> tuple[float, int, tuple[int, int]]:
        subscribers = len(self.subscribers[tid])
        per_subscriber = self.spec.partition_counts[tid] / subscribers
        return (-per_subscriber, subscribers, kafka_uuid_key(tid))

    def build(self) -> dict[str, PartitionMap]:
        if not self.subscribers:
            return {}
        self._keep_subscribed()
        unassigned = {
            tid: [p for p, owner in enumerate(owners) if owner == -1]
            for tid, owners in self.owners.items()
        }
        for tid in sorted((t for t, ps in unassigned.items() if ps), key=self._topic_order):
            for p in unassigned[tid]:
                self._assign(tid, p, self._least_loaded(self.subscribers[tid]))
        balanceable = [t for t, subs in self.subscribers.items() if len(subs) >= 2]
        if balanceable:
            self._balance(sorted(balanceable, key=self._topic_order))
        return {mid: _freeze(self.assignment[i]) for i, mid in enumerate(self.member_ids)}

    def _keep_subscribed(self) -> None:
        for index, mid in enumerate(self.member_ids):
            member = self.spec.members[mid]
            for tid, ps in member.assignment.items():
                if tid not in member.subscribed_topic_ids:
                    continue
                for p in _valid(self.spec, tid, ps):
                    if self.owners[tid][p] == -1:
                        self._assign(tid, p, index)

    def _least_loaded(self, members: list[int]) -> int:
        return min(members, key=lambda i: (self.sizes[i], i))

    def _assign(self, tid: uuid.UUID, p: int, index: int) -> None:
        old = self.owners[tid][p]
        if old != -1:
            ps = self.assignment[old][tid]
            ps.discard(p)
            if not ps:
                del self.assignment[old][tid]
            self.sizes[old] -= 1
        self.assignment[index].setdefault(tid, set()).add(p)
        self.owners[tid][p] = index
        self.sizes[index] += 1

    def _balance(self, topics: list[uuid.UUID]) -> None:
        last_moved = -1
        for _ in range(_MAX_ITERATIONS):
            for i, tid in enumerate(topics):
                if i == last_moved:
                    return  # a full round over the topics without a move
                if self._balance_topic(tid) > 0 or last_moved == -1:
                    last_moved = i

    def _balance_topic(self, tid: uuid.UUID) -> int:
        """Move partitions of `tid` from its most to its least loaded subscribers while the
        difference between them is over one (each move takes the giver's highest partition)."""
        subscribers = self.subscribers[tid]
        owners = self.owners[tid]
        moved = 0
        while True:
            givers = [i for i in subscribers if tid in self.assignment[i]]
            if not givers:
                return moved
            giver = max(givers, key=lambda i: (self.sizes[i], i))
            taker = self._least_loaded(subscribers)
            if self.sizes[giver] - self.sizes[taker] <= 1:
                return moved
            p = max(q for q, owner in enumerate(owners) if owner == giver)
            self._assign(tid, p, taker)
            moved += 1


# -- range ------------------------------------------------------------------------------------


class RangeAssignor:
    name = "range"

    def assign(self, spec: GroupSpec) -> dict[str, PartitionMap]:
        if not spec.members:
            return {}
        members = sorted(spec.members.values(), key=_range_order)
        subscribers: dict[uuid.UUID, int] = {}
        for m in members:
            for tid in m.subscribed_topic_ids:
                if tid not in spec.partition_counts:
                    raise AssignorError(f"member subscribes to topic {tid}, which does not exist")
                subscribers[tid] = subscribers.get(tid, 0) + 1
        next_start = dict.fromkeys(subscribers, 0)
        extras = {tid: spec.partition_counts[tid] % n for tid, n in subscribers.items()}
        result: dict[str, PartitionMap] = {}
        for m in members:
            assignment: dict[uuid.UUID, set[int]] = {}
            for tid in m.subscribed_topic_ids:
                count = spec.partition_counts[tid]
                quota = count // subscribers[tid]
                if extras[tid] > 0:
                    quota += 1
                    extras[tid] -= 1
                start = next_start[tid]
                end = min(start + quota, count)
                next_start[tid] = end
                if start < end:
                    assignment[tid] = set(range(start, end))
            result[m.member_id] = _freeze(assignment)
        return result


def _range_order(member: MemberSpec) -> tuple[int, str]:
    """Static members first, by instance id; then dynamic members by member id."""
    if member.instance_id is not None:
        return (0, member.instance_id)
    return (1, member.member_id)


ASSIGNORS: dict[str, PartitionAssignor] = {
    UniformAssignor.name: UniformAssignor(),
    RangeAssignor.name: RangeAssignor(),
}

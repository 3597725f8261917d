"""The share groups' `simple` assignor (Kafka 4.4's SimpleAssignor, KIP-932).

Unlike a consumer group's assignors, a partition may go to several members: with M members and
P partitions each partition is shared by ceil(M / P) members ("desired sharing"), and member i
gets desired[i] = ceil(s*P*(i+1)/M) - ceil(s*P*i/M) partitions, so 1 partition and 3 members
give every member the partition, and 6 partitions and 3 members give each member 2 of its own.
The assignment is sticky: a member keeps what it holds while that stays within its count and
the partition's sharing (SimpleHomogeneousAssignmentBuilder's revoke steps), then the partitions
below their sharing are filled round-robin by members below their count.

Members subscribed to different topics (Kafka's heterogeneous builder) are assigned topic by
topic: each topic's partitions among the members subscribed to it, by the same rule. That is
our reading of SimpleHeterogeneousAssignmentBuilder, not checked against Kafka case by case.
Ties Kafka leaves to HashMap order are broken by member id and partition order.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from coordinator.core.share.group import PartitionMap

__all__ = ["NAME", "assign"]

NAME = "simple"
TopicPartition = tuple[uuid.UUID, int]


def assign(
    subscriptions: Mapping[str, frozenset[uuid.UUID]],
    partitions: Mapping[uuid.UUID, int],
    current: Mapping[str, PartitionMap],
) -> dict[str, PartitionMap]:
    """Target assignment: member id -> partitions. `subscriptions` are the members' topic ids
    (existing topics only), `partitions` each topic's partition count, `current` the previous
    target."""
    members = sorted(subscriptions)
    held: dict[str, set[TopicPartition]] = {m: set() for m in members}
    groups: dict[frozenset[uuid.UUID], list[str]] = {}
    for m in members:
        groups.setdefault(subscriptions[m], []).append(m)
    if len(groups) == 1:
        topics = sorted(next(iter(groups)), key=lambda t: t.bytes)
        _assign_homogeneous(members, topics, partitions, current, held)
    else:
        for topic in sorted({t for s in subscriptions.values() for t in s}, key=lambda t: t.bytes):
            readers = [m for m in members if topic in subscriptions[m]]
            _assign_homogeneous(readers, [topic], partitions, current, held)
    out: dict[str, PartitionMap] = {}
    for m in members:
        by_topic: dict[uuid.UUID, set[int]] = {}
        for tid, p in held[m]:
            by_topic.setdefault(tid, set()).add(p)
        out[m] = MappingProxyType({t: frozenset(ps) for t, ps in by_topic.items()})
    return out


def _assign_homogeneous(
    members: Sequence[str],
    topics: Sequence[uuid.UUID],
    partitions: Mapping[uuid.UUID, int],
    current: Mapping[str, PartitionMap],
    held: dict[str, set[TopicPartition]],
) -> None:
    targets = [(t, p) for t in topics for p in range(partitions.get(t, 0))]
    if not members or not targets:
        return
    m_count, p_count = len(members), len(targets)
    sharing = -(-m_count // p_count)
    total = sharing * p_count
    desired = {
        m: -(-total * (i + 1) // m_count) - -(-total * i // m_count) for i, m in enumerate(members)
    }
    wanted = set(targets)
    sharers: dict[TopicPartition, set[str]] = {tp: set() for tp in targets}
    mine: dict[str, set[TopicPartition]] = {m: set() for m in members}
    for m in members:  # keep what is still assignable, within the counts
        previous = current.get(m, MappingProxyType({}))
        for tp in sorted((t, p) for t, ps in previous.items() for p in ps):
            if tp in wanted and len(mine[m]) < desired[m] and len(sharers[tp]) < sharing:
                mine[m].add(tp)
                sharers[tp].add(m)
    unfilled = [m for m in members if len(mine[m]) < desired[m]]
    turn = 0
    for tp in targets:
        tried = 0
        while len(sharers[tp]) < sharing and unfilled and tried < len(unfilled):
            m = unfilled[turn % len(unfilled)]
            if m in sharers[tp]:
                turn += 1
                tried += 1
                continue
            mine[m].add(tp)
            sharers[tp].add(m)
            tried = 0
            if len(mine[m]) >= desired[m]:
                unfilled.remove(m)
            else:
                turn += 1
    for m in members:
        held[m] |= mine[m]

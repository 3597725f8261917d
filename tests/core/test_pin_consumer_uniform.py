"""The uniform assignor's choices (coordinator.core.consumer.assignors: Kafka's
UniformHomogeneousAssignmentBuilder and UniformHeterogeneousAssignmentBuilder), pinned where
`make mutation` found them loose: topic ids in Kafka's order (Uuid.compareTo, signed halves),
not the unsigned one; what a current target keeps (its lowest partitions when over quota, none
at or past the topic's partition count, none below 0, and those of the topics still
subscribed even when an unsubscribed one comes first); an unchanged target handed back as the
very same map; unowned partitions handed out topic by topic, most partitions per subscriber
first; and balancing that goes round the topics again when a move in a later topic unbalanced
an earlier one."""

from __future__ import annotations

import uuid
from types import MappingProxyType

import pytest

from coordinator.core.consumer.assignors import (
    AssignorError,
    GroupSpec,
    MemberSpec,
    UniformAssignor,
    kafka_uuid_key,
)
from coordinator.core.consumer.model import EMPTY_PARTITIONS, PartitionMap, SubscriptionType

HOMOGENEOUS = SubscriptionType.HOMOGENEOUS
HETEROGENEOUS = SubscriptionType.HETEROGENEOUS

# Kafka's order (signed most- then least-significant halves) puts NEG first, then LOW_NEG
# (most significant half 3, least significant negative), then LOW, then HIGH; the unsigned
# order of the same ids is LOW, LOW_NEG, HIGH, NEG.
NEG = uuid.UUID(int=(0x8000000000000003 << 64) | 0x8000000000000005)
LOW_NEG = uuid.UUID(int=(3 << 64) | 0xF000000000000001)
LOW = uuid.UUID(int=(3 << 64) | 5)
HIGH = uuid.UUID(int=(7 << 64) | 1)
STALE = uuid.UUID(int=(9 << 64) | 9)  # a topic no member subscribes to any more


def test_topic_ids_compare_as_kafkas_signed_halves() -> None:
    assert kafka_uuid_key(NEG) == (0x8000000000000003 - (1 << 64), 0x8000000000000005 - (1 << 64))
    assert kafka_uuid_key(LOW) == (3, 5)
    assert kafka_uuid_key(LOW_NEG) == (3, 0xF000000000000001 - (1 << 64))
    assert kafka_uuid_key(HIGH) == (7, 1)
    assert sorted([HIGH, LOW, NEG, LOW_NEG], key=kafka_uuid_key) == [NEG, LOW_NEG, LOW, HIGH]


def group(
    kind: SubscriptionType,
    counts: dict[uuid.UUID, int],
    **members: tuple[list[uuid.UUID], dict[uuid.UUID, list[int]]],
) -> GroupSpec:
    """Members by id: (subscribed topics, current target); the target's topics in the order
    given (a dict's order, as a member's target map keeps it)."""
    specs = {}
    for mid, (topics, current) in members.items():
        target: PartitionMap = (
            MappingProxyType({t: frozenset(ps) for t, ps in current.items()})
            if current
            else EMPTY_PARTITIONS
        )
        specs[mid] = MemberSpec(mid, None, None, frozenset(topics), target)
    return GroupSpec(specs, kind, counts)


def assign(spec: GroupSpec) -> dict[str, dict[uuid.UUID, list[int]]]:
    return {
        mid: {t: sorted(ps) for t, ps in a.items()}
        for mid, a in UniformAssignor().assign(spec).items()
    }


def test_homogeneous_hands_out_topics_in_kafkas_order() -> None:
    spec = group(HOMOGENEOUS, {NEG: 2, LOW: 1}, a=([NEG, LOW], {}), b=([NEG, LOW], {}))
    assert assign(spec) == {"a": {NEG: [0]}, "b": {NEG: [1], LOW: [0]}}


def test_homogeneous_drops_partitions_at_or_past_the_count_and_below_zero() -> None:
    # A catalog may shrink a topic (or a record name a partition -1): those partitions are
    # dropped, the rest kept, the freed quota filled.
    shrunk = group(HOMOGENEOUS, {LOW: 2}, a=([LOW], {LOW: [0, 1, 2]}))
    assert assign(shrunk) == {"a": {LOW: [0, 1]}}
    negative = group(HOMOGENEOUS, {LOW: 3}, a=([LOW], {LOW: [-1, 0, 1]}))
    assert assign(negative) == {"a": {LOW: [0, 1, 2]}}


def test_homogeneous_over_quota_keeps_its_lowest_partitions() -> None:
    # {1, 8}: a set whose iteration order is 8 then 1; the member keeps 1 (sorted, as we
    # iterate wherever Kafka iterates a HashSet) and 8 goes to the last member.
    members = {f"m{i}": ([LOW], {}) for i in range(1, 9)}
    spec = group(HOMOGENEOUS, {LOW: 9}, m0=([LOW], {LOW: [1, 8]}), **members)
    result = assign(spec)
    assert result["m0"] == {LOW: [1]}
    assert [result[f"m{i}"] for i in range(1, 9)] == [{LOW: [p]} for p in (0, 2, 3, 4, 5, 6, 7, 8)]


def test_homogeneous_keeps_a_subscribed_topic_listed_after_an_unsubscribed_one() -> None:
    spec = group(HOMOGENEOUS, {LOW: 2}, a=([LOW], {STALE: [0], LOW: [1]}), b=([LOW], {}))
    assert assign(spec) == {"a": {LOW: [1]}, "b": {LOW: [0]}}


def test_homogeneous_hands_an_unchanged_target_back_as_the_same_map() -> None:
    # The docstring's promise (target.py compares old and new targets: the same map's
    # partition sets compare by identity): a balanced group assigned again gets its maps back.
    spec = group(HOMOGENEOUS, {LOW: 4}, a=([LOW], {LOW: [0, 1]}), b=([LOW], {LOW: [2, 3]}))
    result = UniformAssignor().assign(spec)
    assert result["a"] is spec.members["a"].assignment
    assert result["b"] is spec.members["b"].assignment


def test_heterogeneous_names_a_topic_it_was_not_given() -> None:
    spec = group(HETEROGENEOUS, {LOW: 1}, a=([LOW], {}), b=([HIGH], {}))
    with pytest.raises(AssignorError, match=f"subscribe to topic {HIGH}, which does not exist"):
        UniformAssignor().assign(spec)


def test_heterogeneous_drops_partitions_at_or_past_the_count() -> None:
    spec = group(HETEROGENEOUS, {LOW: 1, HIGH: 1}, a=([LOW], {LOW: [1]}), b=([HIGH], {}))
    assert assign(spec) == {"a": {LOW: [0]}, "b": {HIGH: [0]}}


def test_heterogeneous_keeps_a_subscribed_topic_listed_after_an_unsubscribed_one() -> None:
    spec = group(
        HETEROGENEOUS,
        {LOW: 1, HIGH: 1},
        a=([LOW], {}),
        b=([LOW], {STALE: [0, 1], LOW: [0]}),
        c=([LOW, HIGH], {}),
    )
    assert assign(spec) == {"a": {}, "b": {LOW: [0]}, "c": {HIGH: [0]}}


def test_heterogeneous_hands_out_the_most_partitions_per_subscriber_first() -> None:
    # HIGH: 2 partitions for a and c (1 each); LOW_NEG: 1 partition for three members. HIGH
    # first: a and c take one each, b the LOW_NEG partition.
    spec = group(
        HETEROGENEOUS,
        {LOW_NEG: 1, HIGH: 2},
        a=([LOW_NEG, HIGH], {}),
        b=([LOW_NEG], {}),
        c=([LOW_NEG, HIGH], {}),
    )
    assert assign(spec) == {"a": {HIGH: [0]}, "b": {LOW_NEG: [0]}, "c": {HIGH: [1]}}
    # NEG: 1 partition for three members (1/3); LOW_NEG: 2 for one (2); HIGH: 1 for two (1/2).
    spec = group(
        HETEROGENEOUS,
        {LOW_NEG: 2, HIGH: 1, NEG: 1},
        a=([NEG, HIGH], {}),
        b=([NEG, LOW_NEG], {}),
        c=([NEG, HIGH], {}),
    )
    assert assign(spec) == {"a": {HIGH: [0]}, "b": {LOW_NEG: [0, 1]}, "c": {NEG: [0]}}


def test_heterogeneous_balances_topics_in_kafkas_order() -> None:
    # a holds both topics' partitions; b subscribes to both: the first topic in Kafka's order
    # (NEG) is balanced first, so b takes NEG's partition.
    spec = group(
        HETEROGENEOUS, {NEG: 1, LOW: 1}, a=([NEG, LOW], {LOW: [0], NEG: [0]}), b=([NEG, LOW], {})
    )
    assert assign(spec) == {"a": {LOW: [0]}, "b": {NEG: [0]}}


def test_heterogeneous_balances_a_topic_again_after_a_later_topics_move() -> None:
    # NEG (8 partitions: b, c) is handed out first: b ends with 5, c with 4 (3 of NEG and LOW's
    # partition). Balancing LOW (a, c) moves LOW's partition to a, which leaves c with 3: NEG
    # is balanced again in the next round, b giving its highest partition to c.
    spec = group(
        HETEROGENEOUS,
        {NEG: 8, LOW_NEG: 1},
        a=([LOW_NEG], {}),
        b=([NEG], {NEG: [3, 4, 6]}),
        c=([NEG, LOW_NEG], {LOW_NEG: [0]}),
    )
    assert assign(spec) == {
        "a": {LOW_NEG: [0]},
        "b": {NEG: [2, 3, 4, 6]},
        "c": {NEG: [0, 1, 5, 7]},
    }
    # Each topic moved once in a round, the second round's moves unbalancing the first again.
    spec = group(
        HETEROGENEOUS,
        {HIGH: 3, LOW: 3},
        a=([LOW, HIGH], {STALE: [0, 1, 2], LOW: [0, 1, 2], HIGH: [2]}),
        b=([LOW], {HIGH: [0, 1]}),
        c=([LOW, HIGH], {}),
        d=([LOW], {}),
    )
    assert assign(spec) == {
        "a": {LOW: [0], HIGH: [2]},
        "b": {LOW: [2]},
        "c": {HIGH: [0, 1]},
        "d": {LOW: [1]},
    }

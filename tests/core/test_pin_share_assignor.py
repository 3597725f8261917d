"""The share groups' `simple` assignor (Kafka 4.4's SimpleAssignor), pinned on small cases where
mutation testing found it loose (issue 36, `make mutation`): members with one subscription share
the partitions of all their topics together, each member's count is desired[i] =
ceil(s*P*(i+1)/M) - ceil(s*P*i/M), and the assignment is sticky within those counts and each
partition's sharing s = ceil(M/P). Each expected answer below keeps those rules (checked by
`_check`): every partition held by exactly s members, member i holding desired[i] partitions,
and a member keeping what it held while its count and the partition's sharing allow.
"""

from __future__ import annotations

import uuid

import pytest

from coordinator.core.share import assignor

T, U = uuid.UUID(int=1), uuid.UUID(int=2)


def _check(out: dict[str, dict[uuid.UUID, frozenset[int]]], partitions: int) -> None:
    members = sorted(out)
    m, s = len(members), -(-len(members) // partitions)
    total = s * partitions
    for i, member in enumerate(members):
        desired = -(-total * (i + 1) // m) - -(-total * i // m)
        assert len(out[member].get(T, ())) == desired, (member, out)
    for p in range(partitions):
        assert sum(p in out[x].get(T, ()) for x in members) == s, (p, out)


@pytest.mark.parametrize(("members", "partitions", "current", "expected"), [
    # No previous target: round-robin over the partitions, member order.
    (3, 2, {}, {"m0": {0, 1}, "m1": {0}, "m2": {1}}),
    (2, 4, {}, {"m0": {0, 2}, "m1": {1, 3}}),
    # Sticky: a swapped previous target is kept as it is.
    (2, 2, {"m0": {1}, "m1": {0}}, {"m0": {1}, "m1": {0}}),
    # A member keeps no more than its count (m1's is 1 of 3 members on 2 partitions).
    (3, 2, {"m1": {0, 1}}, {"m0": {0, 1}, "m1": {0}, "m2": {1}}),
    # A partition keeps no more than its sharing: m1 gives partition 0 up for partition 1.
    (2, 2, {"m0": {0}, "m1": {0}}, {"m0": {0}, "m1": {1}}),
    # A member already sharing a partition is skipped when the partition needs another.
    (3, 2, {"m0": {0}}, {"m0": {0, 1}, "m1": {0}, "m2": {1}}),
    (3, 2, {"m0": {1}, "m2": {1}}, {"m0": {0, 1}, "m1": {0}, "m2": {1}}),
    (4, 3, {"m0": {0}, "m1": {0}, "m2": {0}},
     {"m0": {0, 1}, "m1": {0}, "m2": {1, 2}, "m3": {2}}),
    (5, 3, {"m1": {0, 1}, "m3": {0}},
     {"m0": {1, 2}, "m1": {0}, "m2": {1}, "m3": {0}, "m4": {2}}),
])  # fmt: skip
def test_the_simple_assignor_on_small_groups(
    members: int, partitions: int, current: dict[str, set[int]], expected: dict[str, set[int]]
) -> None:
    subscriptions = {f"m{i}": frozenset({T}) for i in range(members)}
    previous = {m: {T: frozenset(ps)} for m, ps in current.items()}
    out = assignor.assign(subscriptions, {T: partitions}, previous)  # type: ignore[arg-type]
    got = {m: dict(v) for m, v in out.items()}
    assert got == {m: {T: frozenset(ps)} for m, ps in expected.items()}
    _check(got, partitions)


def test_one_subscription_shares_the_partitions_of_all_its_topics_together() -> None:
    # Two members on two one-partition topics: 2 partitions for 2 members, one each (topic by
    # topic, both members would share both).
    both = frozenset({T, U})
    out = assignor.assign({"m0": both, "m1": both}, {T: 1, U: 1}, {})
    assert {m: dict(v) for m, v in out.items()} == {
        "m0": {T: frozenset({0})}, "m1": {U: frozenset({0})}}
    # Different subscriptions: each topic among its own readers.
    out = assignor.assign({"m0": both, "m1": frozenset({U})}, {T: 1, U: 1}, {})
    assert {m: dict(v) for m, v in out.items()} == {
        "m0": {T: frozenset({0}), U: frozenset({0})}, "m1": {U: frozenset({0})}}



def _assign(members: int, partitions: int, current: dict[str, set[int]]) -> dict[str, set[int]]:
    subscriptions = {f"m{i}": frozenset({T}) for i in range(members)}
    previous = {m: {T: frozenset(ps)} for m, ps in current.items()}
    out = assignor.assign(subscriptions, {T: partitions}, previous)  # type: ignore[arg-type]
    return {m: set(v.get(T, ())) for m, v in out.items()}


def test_members_already_sharing_a_partition_are_passed_over_until_one_can_take_it() -> None:
    # The round-robin fill skips a member below its count that already shares the partition and
    # goes on to the next one, not back to the first, nor past one it never tried: a fill that
    # skipped wrongly left a partition below its sharing and a member below its count here.
    got = _assign(4, 3, {"m1": {0}, "m2": {1}})
    assert got == {"m0": {0, 2}, "m1": {0}, "m2": {1, 2}, "m3": {1}}
    _check({m: {T: frozenset(ps)} for m, ps in got.items()}, 3)
    got = _assign(7, 2, {"m0": {0}, "m1": {0, 1}, "m3": {1}, "m4": {1}, "m5": {1}, "m6": {0}})
    assert got == {"m0": {0, 1}, "m1": {0}, "m2": {0}, "m3": {1}, "m4": {1}, "m5": {1}, "m6": {0}}
    _check({m: {T: frozenset(ps)} for m, ps in got.items()}, 2)


def test_a_partition_no_member_below_its_count_can_take_is_left_short() -> None:
    # Kafka's assignRemainingPartitions: when every member still below its count already shares
    # the partition, no more sharers are found for it and the fill carries on (a slight imbalance
    # Kafka tolerates rather than moving others). 3 members on 2 partitions: m0 wants 2, but
    # partition 1 is full with m1 and m2, so partition 0 keeps one sharer and m0 one partition.
    assert _assign(3, 2, {"m1": {1}, "m2": {1}}) == {"m0": {0}, "m1": {1}, "m2": {1}}
    # 7 members on 3 partitions: partition 0 needs two more sharers, and the members below their
    # count are m0 (which has it) and m3. m3 takes it, then neither can: it is left with two,
    # and m0 fills up on partition 2.
    current = {"m0": {0}, "m1": {1}, "m2": {1}, "m4": {1}, "m5": {2}, "m6": {2}}
    assert _assign(7, 3, current) == {
        "m0": {0, 2}, "m1": {1}, "m2": {1}, "m3": {0}, "m4": {1}, "m5": {2}, "m6": {2}}  # fmt: skip

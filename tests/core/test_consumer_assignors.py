"""Properties of the server-side assignors `uniform` and `range` (Hypothesis)."""

from __future__ import annotations

import uuid
from types import MappingProxyType

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.consumer.assignors import (
    GroupSpec,
    MemberSpec,
    RangeAssignor,
    UniformAssignor,
)
from coordinator.core.consumer.model import (
    EMPTY_PARTITIONS,
    PartitionMap,
    SubscriptionType,
    partition_count,
)

TOPIC_IDS = [uuid.UUID(int=(i + 1) << 64 | (i * 7 + 3)) for i in range(4)]


def owners(result: dict[str, PartitionMap]) -> dict[tuple[uuid.UUID, int], list[str]]:
    out: dict[tuple[uuid.UUID, int], list[str]] = {}
    for mid, a in result.items():
        for t, ps in a.items():
            for p in ps:
                out.setdefault((t, p), []).append(mid)
    return out


def spec_of(
    subs: dict[str, frozenset[uuid.UUID]],
    counts: dict[uuid.UUID, int],
    current: dict[str, PartitionMap] | None = None,
    statics: dict[str, str] | None = None,
) -> GroupSpec:
    current = current or {}
    statics = statics or {}
    members = {
        mid: MemberSpec(mid, statics.get(mid), None, topics, current.get(mid, EMPTY_PARTITIONS))
        for mid, topics in subs.items()
    }
    distinct = {frozenset(t) for t in subs.values()}
    kind = SubscriptionType.HOMOGENEOUS if len(distinct) <= 1 else SubscriptionType.HETEROGENEOUS
    return GroupSpec(members, kind, counts)


@st.composite
def groups(
    draw: st.DrawFn, homogeneous: bool
) -> tuple[dict[str, frozenset[uuid.UUID]], dict[uuid.UUID, int]]:
    n_topics = draw(st.integers(1, 4))
    counts = {TOPIC_IDS[i]: draw(st.integers(1, 12)) for i in range(n_topics)}
    n_members = draw(st.integers(1, 7))
    member_ids = [f"m{i:02d}" for i in range(n_members)]
    if homogeneous:
        topics = frozenset(draw(st.sets(st.sampled_from(list(counts)), min_size=1)))
        subs = dict.fromkeys(member_ids, topics)
    else:
        subs = {
            mid: frozenset(draw(st.sets(st.sampled_from(list(counts)), min_size=1)))
            for mid in member_ids
        }
    return subs, counts


def check_complete(
    result: dict[str, PartitionMap],
    subs: dict[str, frozenset[uuid.UUID]],
    counts: dict[uuid.UUID, int],
) -> None:
    subscribed = set().union(*subs.values())
    expected = {(t, p) for t in subscribed for p in range(counts[t])}
    own = owners(result)
    assert set(own) == expected, "every subscribed partition is assigned"
    assert all(len(v) == 1 for v in own.values()), "and to exactly one member"
    for (t, _), (mid,) in own.items():
        assert t in subs[mid], "only to a member subscribed to its topic"


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=True), st.randoms(use_true_random=False))
def test_uniform_homogeneous_is_complete_balanced_and_sticky(g, rnd) -> None:  # type: ignore[no-untyped-def]
    subs, counts = g
    assignor = UniformAssignor()
    first = assignor.assign(spec_of(subs, counts))
    check_complete(first, subs, counts)
    sizes = [partition_count(first.get(m, EMPTY_PARTITIONS)) for m in subs]
    assert max(sizes) - min(sizes) <= 1
    # Idempotent: the same group reassigned keeps everything.
    assert assignor.assign(spec_of(subs, counts, first)) == first
    # A member joins: everyone keeps what fits its new quota (balance > stickiness).
    joined = dict(subs) | {"zz": next(iter(subs.values()))}
    second = assignor.assign(spec_of(joined, counts, first))
    check_complete(second, joined, counts)
    total = sum(sizes)
    floor = total // len(joined)
    for m in subs:
        kept = {
            (t, p) for t, ps in first.get(m, {}).items() for p in ps if p in second[m].get(t, ())
        }
        assert len(kept) >= min(partition_count(first.get(m, EMPTY_PARTITIONS)), floor)
    # A member leaves: the others keep all they had.
    if len(subs) > 1:
        gone = sorted(subs)[rnd.randrange(len(subs))]
        left = {m: t for m, t in subs.items() if m != gone}
        third = assignor.assign(spec_of(left, counts, first))
        check_complete(third, left, counts)
        for m in left:
            for t, ps in first.get(m, {}).items():
                assert ps <= third[m].get(t, frozenset())


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=False))
def test_uniform_heterogeneous_is_complete_and_stable(g) -> None:  # type: ignore[no-untyped-def]
    subs, counts = g
    assignor = UniformAssignor()
    spec = spec_of(subs, counts)
    first = assignor.assign(
        GroupSpec(spec.members, SubscriptionType.HETEROGENEOUS, spec.partition_counts)
    )
    check_complete(first, subs, counts)
    again = assignor.assign(
        GroupSpec(
            spec_of(subs, counts, first).members,
            SubscriptionType.HETEROGENEOUS,
            counts,
        )
    )
    assert again == first
    # With identical subscriptions the heterogeneous builder balances as well as the other.
    if len({frozenset(t) for t in subs.values()}) == 1:
        sizes = [partition_count(first.get(m, EMPTY_PARTITIONS)) for m in subs]
        assert max(sizes) - min(sizes) <= 1
    # Every topic's subscribers are balanced within one partition of that topic, or the more
    # loaded one holds nothing of it to give.
    for t in counts:
        subscribers = [m for m in subs if t in subs[m]]
        for a in subscribers:
            for b in subscribers:
                size_a = partition_count(first.get(a, EMPTY_PARTITIONS))
                size_b = partition_count(first.get(b, EMPTY_PARTITIONS))
                if size_a - size_b > 1:
                    assert t not in first.get(a, {})


@settings(max_examples=200, deadline=None)
@given(groups(homogeneous=False), st.booleans())
def test_range_is_complete_contiguous_and_ordered(g, static) -> None:  # type: ignore[no-untyped-def]
    subs, counts = g
    statics = {m: f"i-{len(subs) - i}" for i, m in enumerate(sorted(subs))} if static else {}
    result = RangeAssignor().assign(spec_of(subs, counts, statics=statics))
    check_complete(result, subs, counts)
    for t, count in counts.items():
        subscribers = [m for m in subs if t in subs[m]]
        if not subscribers:
            continue
        order = sorted(subscribers, key=lambda m: (0, statics[m]) if m in statics else (1, m))
        ranges = [sorted(result[m].get(t, ())) for m in order]
        flat = [p for r in ranges for p in r]
        assert flat == list(range(count)), "contiguous ranges in member order"
        sizes = [len(r) for r in ranges]
        assert max(sizes) - min(sizes) <= 1
        assert sizes == sorted(sizes, reverse=True), "the extra partitions go first"


def test_range_co_partitions_homogeneous_groups() -> None:
    counts = {TOPIC_IDS[0]: 3, TOPIC_IDS[1]: 3}
    subs = dict.fromkeys(("m0", "m1"), frozenset(counts))
    result = RangeAssignor().assign(spec_of(subs, counts))
    assert {t: sorted(ps) for t, ps in result["m0"].items()} == {
        TOPIC_IDS[0]: [0, 1],
        TOPIC_IDS[1]: [0, 1],
    }


def test_uniform_keeps_a_member_order_independent_result() -> None:
    counts = {TOPIC_IDS[0]: 7}
    subs = {m: frozenset(counts) for m in ("b", "a", "c")}
    one = UniformAssignor().assign(spec_of(subs, counts))
    two = UniformAssignor().assign(spec_of(dict(reversed(list(subs.items()))), counts))
    assert one == two


def test_out_of_range_partitions_are_dropped() -> None:
    counts = {TOPIC_IDS[0]: 2}
    subs = {"a": frozenset(counts)}
    current: dict[str, PartitionMap] = {"a": MappingProxyType({TOPIC_IDS[0]: frozenset({0, 5})})}
    result = UniformAssignor().assign(spec_of(subs, counts, current))
    assert result["a"] == {TOPIC_IDS[0]: frozenset({0, 1})}

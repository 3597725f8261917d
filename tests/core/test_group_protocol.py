"""Protocol selection (docs/protocol.md §5.5, seed 000 rolling upgrade) and subscription parsing
(§10.5)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.core.group import ClassicGroup, Member
from coordinator.core.messages import Protocol
from protocol.consumer import subscription_topics as parse_subscription_topics
from tests.support.fakeclock import Harness, subscription

RR = ("roundrobin", subscription("orders"))
RANGE = ("range", subscription("orders"))


def group_of(*lists: tuple[str, ...]) -> ClassicGroup:
    g = ClassicGroup("g", 0)
    g.state = g.state.__class__.STABLE
    for i, names in enumerate(lists):
        g.add(
            Member(
                f"m{i}",
                None,
                client_id="c",
                client_host="/h",
                rebalance_timeout_ms=1,
                session_timeout_ms=1,
                protocol_type="consumer",
                protocols=tuple(Protocol(n, b"") for n in names),
            )
        )
    return g


def test_candidates_are_protocols_listed_by_every_member() -> None:
    assert group_of(("roundrobin", "range"), ("range",)).select_protocol() == "range"


def test_most_votes_wins() -> None:
    g = group_of(("roundrobin", "range"), ("roundrobin", "range"), ("range", "roundrobin"))
    assert g.select_protocol() == "roundrobin"


def test_tie_broken_by_summed_preference_rank() -> None:
    # votes: a 1, b 1; ranks: a = 0 + 1 + 2 = 3? three members so votes differ; use two + rank
    g = group_of(("a", "b", "c"), ("c", "a", "b"))
    # votes a 1, c 1; ranks a = 0 + 1 = 1, c = 2 + 0 = 2 -> a
    assert g.select_protocol() == "a"


def test_tie_broken_by_name_last() -> None:
    assert group_of(("roundrobin", "range"), ("range", "roundrobin")).select_protocol() == "range"


def reference_selection(lists: list[tuple[str, ...]]) -> str:
    """The "Protocol selection" rule (docs/concepts.md), written out as plainly as possible.

    Candidates: the protocols every member lists. Each member casts one vote, for the first
    candidate in its own list. Most votes wins; ties go to the lowest summed preference rank (the
    sum over members of the protocol's position in that member's list), then to the smallest name.
    """
    candidates = [name for name in lists[0] if all(name in names for names in lists)]
    assert candidates, "the generator always gives the members a shared protocol"

    def first_choice(names: tuple[str, ...]) -> str:
        return next(c for c in names if c in candidates)

    def votes(name: str) -> int:
        return sum(1 for names in lists if first_choice(names) == name)

    def summed_rank(name: str) -> int:
        return sum(names.index(name) for names in lists)

    best_votes = max(votes(c) for c in candidates)
    most_voted = [c for c in candidates if votes(c) == best_votes]
    best_rank = min(summed_rank(c) for c in most_voted)
    return sorted(c for c in most_voted if summed_rank(c) == best_rank)[0]


NAMES = ("a", "b", "c", "d", "e", "range", "roundrobin", "sticky")


@st.composite
def member_lists(draw: st.DrawFn) -> list[tuple[str, ...]]:
    """1-6 members over 3-5 protocols, each listing some of them in a random order of preference,
    all sharing at least one. Small universes make vote and rank ties common."""
    universe = draw(st.lists(st.sampled_from(NAMES), min_size=3, max_size=5, unique=True))
    shared = draw(st.sampled_from(universe))
    n = draw(st.integers(min_value=1, max_value=6))
    lists: list[tuple[str, ...]] = []
    for _ in range(n):
        order = draw(st.permutations(universe))
        keep = draw(st.lists(st.booleans(), min_size=len(order), max_size=len(order)))
        lists.append(tuple(p for p, k in zip(order, keep, strict=True) if k or p == shared))
    return lists


@settings(max_examples=400, deadline=None)
@given(member_lists())
def test_selection_matches_the_readme_rule(lists: list[tuple[str, ...]]) -> None:
    assert group_of(*lists).select_protocol() == reference_selection(lists)


# Member lists on which the rule's parts disagree, so each part is pinned by a plain example.
# [c,a,b] + [b,c,a]: c and b get one vote each; summed ranks c = 0 + 1, b = 2 + 0, a = 1 + 2 -> c.
#   Without the rank tie-break the name decides: b.
# [a,b,c] x2 + [b,c,a] + [c,b,a]: votes a 2, b 1, c 1 -> a. If every member voted for every
#   shared protocol all would tie at 4 and the summed ranks (a 4, b 3, c 5) would give b.
DISTINGUISHING = [
    ([("c", "a", "b"), ("b", "c", "a")], "c"),
    ([("a", "b", "c"), ("a", "b", "c"), ("b", "c", "a"), ("c", "b", "a")], "a"),
]


@pytest.mark.parametrize(("lists", "expected"), DISTINGUISHING)
def test_distinguishing_examples(lists: list[tuple[str, ...]], expected: str) -> None:
    assert reference_selection(lists) == expected
    assert group_of(*lists).select_protocol() == expected


@pytest.mark.parametrize(("lists", "expected"), DISTINGUISHING)
def test_distinguishing_examples_through_join_group(
    lists: list[tuple[str, ...]], expected: str
) -> None:
    """The same lists sent as real JoinGroups: every member is told the selected protocol."""
    h = Harness()
    rts = [
        h.join_dynamic("g", protocols=tuple((n, subscription("orders")) for n in names))[0]
        for names in lists
    ]
    h.advance(9_000)
    replies = [h.reply(rt) for rt in rts]
    assert all(r is not None and r.error.name == "none" for r in replies), replies
    assert {r.protocol_name for r in replies} == {expected}


def test_rolling_upgrade_stays_on_range_until_everyone_lists_roundrobin() -> None:
    h = Harness()
    rts = [h.join_dynamic("g", protocols=(RR, RANGE))[0] for _ in range(2)]
    rts.append(h.join_dynamic("g", protocols=(RANGE,))[0])
    h.advance(9_000)
    assert {h.reply(rt).protocol_name for rt in rts} == {"range"}


def test_rolling_upgrade_switches_once_all_prefer_roundrobin() -> None:
    h = Harness()
    ids, leader, _gen = h.stable_group("g", 2, protocols=(RANGE,))
    # roll: each member restarts with [roundrobin, range]; the last one to roll flips the vote
    rt1 = h.join("g", leader, protocols=(RR, RANGE))
    rt2 = h.join("g", ids[1], protocols=(RR, RANGE))
    assert h.reply(rt1).protocol_name == "roundrobin"
    assert h.reply(rt2).protocol_name == "roundrobin"


def test_rolling_upgrade_half_rolled_keeps_range() -> None:
    h = Harness()
    ids, leader, _gen = h.stable_group("g", 2, protocols=(RANGE,))
    rt1 = h.join("g", leader, protocols=(RR, RANGE))
    rt2 = h.join("g", ids[1], protocols=(RANGE,))
    assert h.reply(rt1).protocol_name == "range" and h.reply(rt2).protocol_name == "range"


def test_parse_subscription_v0() -> None:
    assert parse_subscription_topics(subscription("a", "b")) == ["a", "b"]


def test_parse_subscription_any_version_reads_as_v0_and_ignores_trailing_bytes() -> None:
    data = subscription("a", version=7, user_data=b"xyz") + b"\x00\x00\x00\x00trailing"
    assert parse_subscription_topics(data) == ["a"]


def test_parse_subscription_failures_are_unknown() -> None:
    assert parse_subscription_topics(b"") is None
    assert parse_subscription_topics(b"\x00\x00\x00\x00\x00\x01\x00\x05ab") is None
    assert parse_subscription_topics(b"\x00\x00\xff\xff\xff\xfe") is None
    assert parse_subscription_topics(subscription("a")[:-2]) is None


def test_subscribed_topics_union_over_members() -> None:
    h = Harness()
    _ids, leader, gen = h.stable_group(
        "g", 1, protocols=(("range", subscription("orders", "audit")),)
    )
    assert h.core.state.groups["g"].subscribed_topics == {"orders", "audit"}
    rt_new, new = h.join_dynamic("g", protocols=(("range", subscription("payments")),))
    rt_old = h.join("g", leader, protocols=(("range", subscription("orders", "audit")),))
    for rt in (rt_new, rt_old):  # both members are in the new generation
        joined = h.reply(rt)
        assert joined is not None and joined.error.name == "none", joined
        assert joined.generation_id == gen + 1
    group = h.core.state.groups["g"]
    assert set(group.members) == {leader, new}
    assert group.subscribed_topics == {"orders", "audit", "payments"}


def test_subscribed_topics_unknown_for_non_consumer_type() -> None:
    h = Harness()
    h.stable_group("g", 1, protocol_type="connect", protocols=(("v1", b"junk"),))
    assert h.core.state.groups["g"].subscribed_topics is None

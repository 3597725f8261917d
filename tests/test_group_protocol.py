"""Protocol selection (§5.5, seed 000 rolling upgrade) and subscription parsing (§10.5)."""

from __future__ import annotations

from coordinator.group import ClassicGroup, Member, parse_subscription_topics
from coordinator.messages import Protocol
from tests.fakeclock import Harness, subscription

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
    h.stable_group("g", 1, protocols=(("range", subscription("orders", "audit")),))
    h.join_dynamic("g", protocols=(("range", subscription("payments")),))
    group = h.core._groups["g"]
    h.advance(30_000)
    assert group.subscribed_topics is not None
    assert group.subscribed_topics <= {"orders", "audit", "payments"}


def test_subscribed_topics_unknown_for_non_consumer_type() -> None:
    h = Harness()
    h.stable_group("g", 1, protocol_type="connect", protocols=(("v1", b"junk"),))
    assert h.core._groups["g"].subscribed_topics is None

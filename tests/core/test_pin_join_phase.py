"""The end of a join phase (Kafka's completeGenericGroupJoin, docs/protocol.md §5.4), pinned whole:
the JoinGroup answers and events of a generation formed at the rebalance timeout, one that ends
with no member left (Empty), and one that must wait because only static members that have not
rejoined are left.

Written for mutation testing (issue 28, `make mutation`): each test fails on a change that the
rest of the suite let through.
"""

from __future__ import annotations

from coordinator.core.events import (
    JoinPhaseCompleted,
    LeaveReason,
    MemberJoined,
    MemberLeft,
    RebalanceCause,
    RebalanceCompleted,
    RebalanceStarted,
    RebalanceTrigger,
)
from coordinator.core.messages import ErrorCode as E
from coordinator.core.messages import JoinGroupMember, JoinGroupResult
from tests.support.fakeclock import Harness, subscription


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout() -> None:
    h = Harness()
    (a, b), _leader, gen = h.stable_group("g", n=2)
    h.advance(1_000)
    rt = h.join("g", a)  # a rejoins; b only heartbeats
    started = h.now
    for _ in range(31):
        h.advance(1_000)
        h.heartbeat("g", b, gen)
    assert h.events_of(MemberLeft)[-1] == MemberLeft(
        "g", b, None, LeaveReason.NOT_REJOINED, "c1", "/127.0.0.1"
    )
    assert h.reply(rt) == JoinGroupResult(
        E.none,
        gen + 1,
        "consumer",
        "range",
        a,
        False,
        a,
        (JoinGroupMember(a, None, subscription("orders")),),
    )
    assert h.events_of(JoinPhaseCompleted)[-1] == JoinPhaseCompleted(
        "g", gen + 1, "range", 1, started, started + 30_000
    )


def test_a_join_phase_that_ends_with_nobody_leaves_the_group_empty() -> None:
    h = Harness()
    (a, b), leader, gen = h.stable_group("g", n=2)
    assert a == leader
    h.advance(1_000)
    rt = h.join("g", a)  # the leader rejoins: PreparingRebalance
    started = h.now
    h.advance(1_000)
    h.leave("g", (a, None))
    assert h.reply(rt) is not None  # its parked JoinGroup is answered
    h.leave("g", (b, None))  # the last member: the join phase completes with nobody
    now = h.now
    assert h.core.group("g").state == "Empty"  # type: ignore[union-attr]
    assert h.events_of(JoinPhaseCompleted)[-1] == JoinPhaseCompleted(
        "g", gen + 1, None, 0, started, now
    )
    joined = next(e for e in h.events_of(MemberJoined) if e.member_id == a)
    trigger = RebalanceTrigger(a, None, joined.client_id, joined.client_host)
    assert h.events_of(RebalanceCompleted)[-1] == RebalanceCompleted(
        "g", gen + 1, None, None, 0, RebalanceCause.LEADER_REJOINED, started, now, now, trigger
    )
    record = h.last_effects.records[-1].value
    assert (record.generation_id, record.members, record.protocol_name) == (gen + 1, (), None)  # type: ignore[union-attr]


def test_with_only_unrejoined_static_members_left_the_join_waits_for_them() -> None:
    h = Harness()
    rt1 = h.join("g", instance="i1")
    rt2 = h.join("g", instance="i2")
    h.advance(6_000)
    r1, r2 = h.reply(rt1), h.reply(rt2)
    leader, follower, gen = r1.member_id, r2.member_id, r1.generation_id
    h.sync("g", leader, gen, {leader: b"A1", follower: b"A2"})
    h.sync("g", follower, gen, instance="i2")
    h.join("g", leader, instance="i1")  # PreparingRebalance ...
    h.leave("g", (leader, "i1"))  # ... and the only member that rejoined leaves
    n = len(h.events_of(RebalanceStarted))
    for _ in range(45):  # past the 30 s rebalance timeout; i2 keeps its session, never rejoins
        h.advance(1_000)
        assert h.heartbeat("g", follower, gen, "i2").error is E.rebalance_in_progress
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    assert [e for e in h.events_of(MemberLeft) if e.member_id == follower] == []
    # i2 rejoins: it is the whole group, and the generation forms at once
    r = h.call(h.join_cmd("g", follower, instance="i2"))
    assert (r.error, r.generation_id, r.leader, r.member_id) == (
        E.none,
        gen + 1,
        follower,
        follower,
    )
    assert len(h.events_of(RebalanceStarted)) == n

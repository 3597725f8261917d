"""Static membership (KIP-345, docs/protocol.md §5.6): fencing, replacement without a rebalance."""

from __future__ import annotations

import pytest

from coordinator.core.events import LeaveReason, MemberLeft, RebalanceStarted
from coordinator.core.messages import ErrorCode as E
from tests.support.fakeclock import Harness, subscription


@pytest.fixture
def h() -> Harness:
    return Harness()


def static_stable(h: Harness) -> tuple[str, str, int]:
    """Stable group with static members i1 (leader) and i2 -> (leader id, follower id, gen)."""
    rt1 = h.join("g", instance="i1")
    rt2 = h.join("g", instance="i2")
    h.advance(6_000)
    r1, r2 = h.reply(rt1), h.reply(rt2)
    gen = r1.generation_id
    h.sync("g", r1.member_id, gen, {r1.member_id: b"A1", r2.member_id: b"A2"})
    h.sync("g", r2.member_id, gen)
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]
    return r1.member_id, r2.member_id, gen


def test_follower_replacement_in_stable_does_not_rebalance(h: Harness) -> None:
    leader, follower, gen = static_stable(h)
    n = len(h.events_of(RebalanceStarted))
    r = h.call(h.join_cmd("g", instance="i2"))
    assert r.error is E.none and r.member_id != follower and r.member_id.startswith("i2-")
    assert (r.generation_id, r.leader, r.members, r.skip_assignment) == (gen, leader, (), False)
    assert len(h.events_of(RebalanceStarted)) == n
    # persisted with the new id and the old assignments
    value = h.last_effects.records[-1].value
    assert [(m.member_id, m.assignment) for m in value.members] == [  # type: ignore[union-attr]
        (leader, b"A1"),
        (r.member_id, b"A2"),
    ]
    # it then syncs and gets its preserved assignment
    assert h.reply(h.sync("g", r.member_id, gen, instance="i2")).assignment == b"A2"


def test_old_member_id_is_fenced_after_replacement(h: Harness) -> None:
    _leader, follower, gen = static_stable(h)
    h.call(h.join_cmd("g", instance="i2"))
    assert h.heartbeat("g", follower, gen, "i2").error is E.fenced_instance_id
    left = h.events_of(MemberLeft)[-1]
    assert (left.member_id, left.reason) == (follower, LeaveReason.FENCED)


def test_leader_replacement_v9_gets_members_and_skip_assignment(h: Harness) -> None:
    _leader, follower, _gen = static_stable(h)
    r = h.call(h.join_cmd("g", instance="i1", version=9))
    assert r.leader == r.member_id and r.skip_assignment is True
    assert [m.member_id for m in r.members] == [r.member_id, follower]
    assert h.core.group("g").leader_id == r.member_id  # type: ignore[union-attr]


def test_leader_replacement_v8_sees_old_leader_id(h: Harness) -> None:
    leader, _follower, _gen = static_stable(h)
    r = h.call(h.join_cmd("g", instance="i1", version=8))
    assert r.leader == leader and r.member_id != leader
    assert r.members == () and r.skip_assignment is False
    assert h.core.group("g").leader_id == r.member_id  # type: ignore[union-attr]


def test_replacement_that_changes_protocol_rebalances(h: Harness) -> None:
    _leader, _follower, _gen = static_stable(h)
    protocols = (("roundrobin", subscription("orders")), ("range", subscription("orders")))
    h.call(h.join_cmd("g", instance="i1", protocols=protocols))  # i1 prefers roundrobin
    protocols2 = (("roundrobin", subscription("orders")), ("range", subscription("orders")))
    rt = h.join("g", instance="i2", protocols=protocols2)  # both now vote roundrobin
    assert h.reply(rt) is None
    assert h.events_of(RebalanceStarted)[-1].cause == "static_member_replaced"


def test_replacement_in_completing_rebalance_always_rebalances(h: Harness) -> None:
    rt1 = h.join("g", instance="i1")
    rt2 = h.join("g", instance="i2")
    h.advance(6_000)
    gen = h.reply(rt1).generation_id
    rt_sync = h.sync("g", h.reply(rt2).member_id, gen, instance="i2")
    rt = h.join("g", instance="i2")
    assert h.reply(rt_sync).error is E.fenced_instance_id
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    assert h.reply(rt) is None


def test_replacement_in_preparing_fences_old_parked_join(h: Harness) -> None:
    leader, follower, _gen = static_stable(h)
    rt_old = h.join("g", leader, instance="i1")  # leader rejoin -> PreparingRebalance
    rt_new = h.join("g", instance="i1")
    r = h.reply(rt_old)
    assert r.error is E.fenced_instance_id and r.member_id == leader
    assert h.reply(rt_new) is None
    rt_f = h.join("g", follower, instance="i2")
    assert h.reply(rt_new).error is E.none and h.reply(rt_f).error is E.none


def test_static_members_are_not_dropped_by_the_join_timeout(h: Harness) -> None:
    leader, follower, gen = static_stable(h)
    rt = h.join("g", leader, instance="i1")
    h.heartbeat("g", follower, gen, "i2")
    for _ in range(3):
        h.advance(9_000)
        h.heartbeat("g", follower, gen, "i2")
    h.advance(3_000)  # 30 s: join timer -> completes; the static follower is kept
    r = h.reply(rt)
    assert r.error is E.none
    assert {m.member_id for m in r.members} == {leader, follower}


def test_join_waits_while_only_non_rejoined_static_members_remain(h: Harness) -> None:
    leader, follower, gen = static_stable(h)
    h.join("g", leader, instance="i1")
    h.leave("g", (leader, "i1"))
    snap = h.core.group("g")
    assert snap is not None and snap.state == "PreparingRebalance"
    h.heartbeat("g", follower, gen, "i2")
    h.advance(10_000)  # follower never rejoins and stops heartbeating: expires -> Empty
    assert h.core.group("g").state == "Empty"  # type: ignore[union-attr]


def test_static_member_with_known_id_rejoin_in_stable_is_immediate(h: Harness) -> None:
    _leader, follower, gen = static_stable(h)
    r = h.call(h.join_cmd("g", follower, instance="i2"))
    assert r.error is E.none and r.member_id == follower and r.generation_id == gen


def test_static_leader_that_heartbeats_but_does_not_rejoin_loses_the_leadership(
    h: Harness,
) -> None:
    """The static leader keeps beating (so it stays a member) but never rejoins; the follower
    rejoins. When the join phase ends at the rebalance timeout, a member that did rejoin must
    become leader and get the member list, or nobody could assign (Kafka's onCompleteJoin:
    `if (!group.maybeElectNewJoinedLeader() && !group.allMembers.isEmpty)`)."""
    leader, follower, gen = static_stable(h)
    changed = (("range", subscription("orders", "audit")),)
    rt_f = h.join("g", follower, instance="i2", protocols=changed)  # metadata changed: rebalance
    assert h.reply(rt_f) is None
    for _ in range(10):  # 30 s of the leader beating without rejoining
        h.advance(3_000)
        if h.reply(rt_f) is not None:
            break
        assert h.heartbeat("g", leader, gen, "i1").error is E.rebalance_in_progress
    r = h.reply(rt_f)
    assert r is not None and r.error is E.none, r
    assert r.generation_id == gen + 1
    assert r.leader == follower
    assert {m.member_id for m in r.members} == {leader, follower}
    assert h.core.group("g").leader_id == follower  # type: ignore[union-attr]
    # The new leader can assign: its SyncGroup completes the generation.
    done = h.reply(h.sync("g", follower, gen + 1, {follower: b"F", leader: b"L"}, instance="i2"))
    assert done.error is E.none and done.assignment == b"F"
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]

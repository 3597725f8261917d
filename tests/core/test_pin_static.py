"""Static replacement (KIP-345, docs/protocol.md §5.6), pinned whole: what the replacing member is
told, what the events and the record say about the old and the new id, and how a replaced member
that had not synced yet is held to the pending-sync deadline under its new id.

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
    RebalanceStarted,
    RebalanceTrigger,
)
from coordinator.core.messages import ErrorCode as E
from coordinator.core.messages import JoinGroupResult
from tests.support.fakeclock import Harness, subscription

RANGE = (("range", subscription("orders")),)


def two_static(h: Harness) -> tuple[str, str, int]:
    """i1 (client c1 on host h1, leader) and i2 (c2 on h2) joined: CompletingRebalance.
    -> (i1's id, i2's id, generation)."""
    rt1 = h.join("g", instance="i1", client_id="c1", host="/10.0.0.1")
    rt2 = h.join("g", instance="i2", client_id="c2", host="/10.0.0.2")
    h.advance(6_000)  # the initial delay, extended once by the second member
    r1, r2 = h.reply(rt1), h.reply(rt2)
    assert r1.error is E.none and r2.error is E.none
    return r1.member_id, r2.member_id, r1.generation_id


def test_follower_replaced_in_stable_is_told_the_whole_generation() -> None:
    h = Harness()
    leader, follower, gen = two_static(h)
    h.sync("g", leader, gen, {leader: b"A1", follower: b"A2"})
    h.sync("g", follower, gen, instance="i2")
    r = h.call(h.join_cmd("g", instance="i2", client_id="c2-new", version=5))
    snapshot = h.last_effects.records[-1].value
    assert r == JoinGroupResult(E.none, gen, "consumer", "range", leader, False, r.member_id, ())
    # the old id leaves fenced, the new one joins: both under i2's client and host
    assert h.events[-2:] == [
        MemberLeft("g", follower, "i2", LeaveReason.FENCED, "c2", "/10.0.0.2"),
        MemberJoined("g", r.member_id, "i2", "c2", "/10.0.0.2"),
    ]
    # the new id keeps i2's identity: in DescribeGroups and in the persisted snapshot
    described = {m.member_id: m for m in h.describe("g")[0].members}
    new = described[r.member_id]
    assert (new.group_instance_id, new.client_id, new.client_host) == ("i2", "c2", "/10.0.0.2")
    stored = {m.member_id: m for m in snapshot.members}  # type: ignore[union-attr]
    assert stored[r.member_id].group_instance_id == "i2"
    assert (stored[r.member_id].client_id, stored[r.member_id].client_host) == ("c2", "/10.0.0.2")


def test_a_replacement_that_moves_the_vote_rebalances_with_its_cause_and_member() -> None:
    h = Harness()
    both = (("range", subscription("orders")), ("roundrobin", subscription("orders")))
    rt = h.join("g", instance="i1", protocols=both)
    h.advance(h.config.initial_rebalance_delay_ms)
    first = h.reply(rt)
    h.sync("g", first.member_id, first.generation_id, {first.member_id: b"A"})
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]
    rt2 = h.join("g", instance="i1", protocols=tuple(reversed(both)))
    joined = h.events_of(MemberJoined)[-1]
    new_id = joined.member_id
    started = h.events_of(RebalanceStarted)[-1]
    trigger = RebalanceTrigger(
        new_id, joined.group_instance_id, joined.client_id, joined.client_host
    )
    cause = RebalanceCause.STATIC_MEMBER_REPLACED
    assert started == RebalanceStarted("g", cause, new_id, h.now, trigger)
    # the only member has rejoined: the new generation forms at once, on its new first choice
    r = h.reply(rt2)
    assert (r.error, r.protocol_name, r.member_id) == (E.none, "roundrobin", new_id)


def test_a_replacement_in_completing_rebalance_names_itself_as_the_cause() -> None:
    h = Harness()
    two_static(h)
    h.join("g", instance="i2")
    joined = h.events_of(MemberJoined)[-1]
    new_id = joined.member_id
    started = h.events_of(RebalanceStarted)[-1]
    trigger = RebalanceTrigger(
        new_id, joined.group_instance_id, joined.client_id, joined.client_host
    )
    cause = RebalanceCause.STATIC_MEMBER_REPLACED
    assert started == RebalanceStarted("g", cause, new_id, h.now, trigger)


def test_a_replacement_that_is_the_last_rejoin_completes_the_join_at_once() -> None:
    h = Harness()
    leader, follower, gen = two_static(h)
    h.sync("g", leader, gen, {leader: b"A1", follower: b"A2"})
    h.sync("g", follower, gen, instance="i2")
    h.advance(1_000)
    rt_leader = h.join("g", leader, instance="i1")  # PreparingRebalance, waiting for i2
    assert h.reply(rt_leader) is None
    h.advance(1_000)
    rt_new = h.join("g", instance="i2")  # i2 under a new id: every member has now rejoined
    r_leader, r_new = h.reply(rt_leader), h.reply(rt_new)
    assert r_leader.error is E.none and r_new.error is E.none
    assert r_new.generation_id == gen + 1
    done = h.events_of(JoinPhaseCompleted)[-1]
    assert (done.generation_id, done.now_ms) == (gen + 1, h.now)


def test_a_replaced_follower_that_never_syncs_is_dropped_at_the_sync_deadline() -> None:
    h = Harness()
    leader, _follower, gen = two_static(h)
    h.sync("g", leader, gen, {leader: b"A1"})  # Stable; i2 has not synced yet
    h.advance(1_000)
    r = h.call(h.join_cmd("g", instance="i2"))  # replaced in Stable: no rebalance
    assert r.error is E.none and r.generation_id == gen
    for _ in range(40):  # both keep their sessions; nobody sends the missing SyncGroup
        h.advance(1_000)
        h.heartbeat("g", leader, gen, "i1")
        h.heartbeat("g", r.member_id, gen, "i2")
        if h.events_of(RebalanceStarted)[-1].cause is RebalanceCause.SYNC_EXPIRED:
            break
    left = h.events_of(MemberLeft)[-1]
    assert (left.member_id, left.reason) == (r.member_id, LeaveReason.SYNC_EXPIRED)
    assert h.events_of(RebalanceStarted)[-1].cause is RebalanceCause.SYNC_EXPIRED


def test_a_replaced_follower_that_syncs_in_time_is_not_expired() -> None:
    h = Harness()
    leader, _follower, gen = two_static(h)
    h.sync("g", leader, gen, {leader: b"A1"})
    h.advance(1_000)
    r = h.call(h.join_cmd("g", instance="i2"))
    assert h.reply(h.sync("g", r.member_id, gen, instance="i2")).error is E.none
    n = len(h.events_of(RebalanceStarted))
    for _ in range(40):  # past the rebalance timeout (30 s), every session kept alive
        h.advance(1_000)
        assert h.heartbeat("g", leader, gen, "i1").error is E.none
        assert h.heartbeat("g", r.member_id, gen, "i2").error is E.none
    assert len(h.events_of(RebalanceStarted)) == n
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]

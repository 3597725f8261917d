"""Who and why (issue 24): every rebalance names its trigger, driven with a fake clock.

A join names the joiner, a leave the member that left (also when an admin removes a static member
by instance id, and the first one of a batch leave), an expiry the expired member, a member that
never synced the first such member, a topic change no member but the topic. The trigger is on
RebalanceStarted and, unchanged, on the RebalanceCompleted that ends that rebalance.
"""

from __future__ import annotations

from coordinator.core.events import (
    NO_TRIGGER,
    MemberJoined,
    RebalanceCause,
    RebalanceCompleted,
    RebalanceStarted,
    RebalanceTrigger,
)
from tests.core.test_group_static import static_stable
from tests.core.test_topic_trigger import change, grown
from tests.support.fakeclock import Harness

C = RebalanceCause


def trigger_of(h: Harness, member_id: str) -> RebalanceTrigger:
    """What the member told the coordinator about itself when it joined."""
    joined = [e for e in h.events_of(MemberJoined) if e.member_id == member_id][-1]
    return RebalanceTrigger(
        member_id, joined.group_instance_id, joined.client_id, joined.client_host
    )


def last_started(h: Harness) -> RebalanceStarted:
    started: RebalanceStarted = h.events_of(RebalanceStarted)[-1]
    return started


def finish(h: Harness, group: str = "g") -> RebalanceCompleted:
    """Every remaining member rejoins and syncs; -> the completion."""
    ids = [m.member_id for m in h.core.group(group).members]  # type: ignore[union-attr]
    rts = [h.join(group, m) for m in ids]
    first = h.reply(rts[0])
    for m in ids:
        assignments = dict.fromkeys(ids, b"a") if m == first.leader else None
        h.sync(group, m, first.generation_id, assignments)
    assert h.core.group(group).state == "Stable"  # type: ignore[union-attr]
    completed: RebalanceCompleted = h.events_of(RebalanceCompleted)[-1]
    return completed


def test_a_join_names_the_joiner() -> None:
    h = Harness()
    h.stable_group("g", n=1)
    h.advance(1_000)
    first = h.call(h.join_cmd("g", client_id="newcomer", host="/10.1.2.3"))
    rt = h.join("g", first.member_id, client_id="newcomer", host="/10.1.2.3")
    started = last_started(h)
    expected = RebalanceTrigger(first.member_id, None, "newcomer", "/10.1.2.3")
    assert started == RebalanceStarted("g", C.MEMBER_JOINED, first.member_id, h.now, expected)
    assert h.reply(rt) is None  # parked until the old member rejoins
    completed = finish(h)
    assert (completed.cause, completed.trigger) == (C.MEMBER_JOINED, expected)


def test_a_leave_names_the_member_that_left() -> None:
    h = Harness()
    ids, _leader, _ = h.stable_group("g", n=3)
    leaving = ids[1]
    expected = trigger_of(h, leaving)
    assert expected.client_id == "c1"
    h.advance(500)
    h.leave("g", (leaving, None))
    started = last_started(h)
    assert started == RebalanceStarted("g", C.MEMBER_LEFT, leaving, h.now, expected)
    completed = finish(h)
    assert (completed.cause, completed.trigger) == (C.MEMBER_LEFT, expected)


def test_a_batch_leave_names_the_first_member_removed() -> None:
    h = Harness()
    ids, _, _ = h.stable_group("g", n=3)
    # v3+ batch: an unknown member first (removes nobody), then two real ones.
    h.leave("g", ("nobody", None), (ids[2], None), (ids[0], None))
    assert last_started(h).trigger == RebalanceTrigger(ids[2], None, "c2", "/127.0.0.1")
    assert len(h.events_of(RebalanceStarted)) == 2  # the initial one and this one


def test_an_admin_removal_by_instance_id_names_the_removed_static_member() -> None:
    h = Harness()
    _, follower, _ = static_stable(h)
    expected = trigger_of(h, follower)
    assert expected.group_instance_id == "i2"
    h.leave("g", ("", "i2"))  # the admin's LeaveGroup names only the instance id
    assert last_started(h).trigger == expected
    assert last_started(h).member_id == follower


def test_a_session_expiry_names_the_expired_member() -> None:
    h = Harness()
    ids, leader, gen = h.stable_group("g", n=2, session=6_000)
    silent = next(m for m in ids if m != leader)
    expected = trigger_of(h, silent)
    for _ in range(4):  # the leader heartbeats, the other member stays silent
        h.advance(2_000)
        h.heartbeat("g", leader, gen)
    started = last_started(h)
    assert started.cause is C.SESSION_EXPIRED
    assert started == RebalanceStarted("g", C.SESSION_EXPIRED, silent, started.now_ms, expected)
    completed = finish(h)
    assert (completed.cause, completed.trigger) == (C.SESSION_EXPIRED, expected)


def test_a_sync_expiry_names_the_first_member_that_never_synced() -> None:
    h = Harness()
    rt1, a = h.join_dynamic("g", client_id="fast")
    rt2, b = h.join_dynamic("g", client_id="slow")
    h.advance(6_000)
    gen = h.reply(rt1).generation_id
    h.sync("g", a, gen, {a: b"A", b: b"B"})  # b never syncs, but heartbeats
    for _ in range(3):
        h.heartbeat("g", a, gen)
        h.heartbeat("g", b, gen)
        h.advance(9_000)
    h.heartbeat("g", a, gen)
    h.heartbeat("g", b, gen)
    h.advance(3_000)  # the rebalance timeout since the join completed: the sync timer fires
    assert h.reply(rt2) is not None
    started = last_started(h)
    assert started.cause is C.SYNC_EXPIRED
    assert started.trigger == RebalanceTrigger(b, None, "slow", "/127.0.0.1")


def test_a_topic_change_names_the_topic_and_no_member() -> None:
    h = Harness()
    h.stable_group("g", n=2)
    h.advance(1_000)
    change(h, "orders", grown(h, "orders", 8))
    started = last_started(h)
    expected = RebalanceTrigger(topics=("orders",))
    assert started == RebalanceStarted("g", C.PARTITIONS_ADDED, None, h.now, expected)
    completed = finish(h)
    assert (completed.cause, completed.trigger) == (C.PARTITIONS_ADDED, expected)


def test_a_rejoin_names_the_member_and_the_trigger_moves_on_with_the_next_rebalance() -> None:
    h = Harness()
    _, leader, _ = h.stable_group("g", n=2)
    h.advance(1_000)
    h.join("g", leader)  # the leader rejoins with the same protocols
    assert last_started(h).trigger == trigger_of(h, leader)
    assert last_started(h).cause is C.LEADER_REJOINED
    finish(h)
    change(h, "orders", grown(h, "orders", 8))
    assert last_started(h).trigger == RebalanceTrigger(topics=("orders",))
    assert finish(h).trigger.member_id is None


def test_the_very_first_rebalance_names_the_first_member() -> None:
    h = Harness()
    h.stable_group("g", n=1)
    (started,) = h.events_of(RebalanceStarted)
    (completed,) = h.events_of(RebalanceCompleted)
    assert started.trigger != NO_TRIGGER and started.trigger.client_id == "c0"
    assert completed.trigger == started.trigger

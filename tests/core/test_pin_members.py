"""Removing a member, pinned whole: a static member that is gone frees its instance id, a removed
member's parked SyncGroup is answered, and the MemberLeft event names the member fully.

Written for mutation testing (issue 28, `make mutation`): each test fails on a change that the
rest of the suite let through.
"""

from __future__ import annotations

from coordinator.core.events import LeaveReason, MemberLeft
from coordinator.core.messages import ErrorCode as E
from coordinator.core.messages import SyncGroupResult
from tests.core.test_pin_static import two_static
from tests.support.fakeclock import Harness


def test_a_static_member_that_left_frees_its_instance_id() -> None:
    h = Harness()
    leader, follower, gen = two_static(h)
    h.sync("g", leader, gen, {leader: b"A1", follower: b"A2"})
    h.sync("g", follower, gen, instance="i2")
    assert h.leave("g", (follower, "i2")).members[0].error is E.none
    assert h.events_of(MemberLeft)[-1] == MemberLeft(
        "g", follower, "i2", LeaveReason.LEFT, "c2", "/10.0.0.2"
    )
    # i2 comes back: a new member, not a replacement of the one that left (nobody is fenced)
    rt = h.join("g", instance="i2")
    rt_leader = h.join("g", leader, instance="i1")
    r, r_leader = h.reply(rt), h.reply(rt_leader)
    assert r is not None and r.error is E.none and r.member_id not in (follower, "")
    assert r_leader.error is E.none and r_leader.generation_id == gen + 1
    assert [m.member_id for m in r_leader.members] == [leader, r.member_id]
    assert [e for e in h.events_of(MemberLeft) if e.reason is LeaveReason.FENCED] == []
    # and its old id stays unknown
    assert h.heartbeat("g", follower, gen + 1).error is E.unknown_member_id


def test_a_member_removed_while_its_sync_is_parked_gets_an_answer() -> None:
    h = Harness()
    _leader, follower, gen = two_static(h)
    rt_sync = h.sync("g", follower, gen, instance="i2")  # parked: the leader has not synced
    assert h.reply(rt_sync) is None
    h.leave("g", ("", "i2"))  # an admin removes i2 by its instance id
    assert h.reply(rt_sync) == SyncGroupResult(E.unknown_member_id)


def test_an_expired_static_member_is_named_in_full() -> None:
    h = Harness()
    leader, follower, gen = two_static(h)
    h.sync("g", leader, gen, {leader: b"A1", follower: b"A2"})
    h.sync("g", follower, gen, instance="i2")
    for _ in range(12):  # only the leader heartbeats: i2's 10 s session runs out
        h.advance(1_000)
        h.heartbeat("g", leader, gen, "i1")
    assert h.events_of(MemberLeft)[-1] == MemberLeft(
        "g", follower, "i2", LeaveReason.EXPIRED, "c2", "/10.0.0.2"
    )

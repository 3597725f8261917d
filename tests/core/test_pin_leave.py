"""LeaveGroup (docs/protocol.md §8), pinned whole: the per-member results, the admin removal of a
static member by instance id, and what a leave does to a group that is rebalancing.

Written for mutation testing (issue 28, `make mutation`): each test fails on a change that the
rest of the suite let through.
"""

from __future__ import annotations

from coordinator.core.events import (
    LeaveReason,
    MemberLeft,
    RebalanceCause,
    RebalanceStarted,
    RebalanceTrigger,
)
from coordinator.core.messages import ErrorCode as E
from coordinator.core.messages import LeaveGroupResult, LeftMember
from tests.core.test_group_static import static_stable
from tests.support.fakeclock import Harness


def test_leaving_an_unknown_group_answers_each_member_unknown() -> None:
    h = Harness()
    r = h.leave("nope", ("m-1", "i1"), ("m-2", None))
    assert r == LeaveGroupResult(
        E.none,
        (
            LeftMember("m-1", "i1", E.unknown_member_id),
            LeftMember("m-2", None, E.unknown_member_id),
        ),
    )


def test_each_member_gets_its_own_result() -> None:
    h = Harness()
    leader, follower, _gen = static_stable(h)
    r = h.leave("g", (follower, "i2"), ("m-unknown", None), ("m-x", "i1"))
    assert r == LeaveGroupResult(
        E.none,
        (
            LeftMember(follower, "i2", E.none),
            LeftMember("m-unknown", None, E.unknown_member_id),
            LeftMember("m-x", "i1", E.fenced_instance_id),  # i1 is `leader`, not m-x
        ),
    )
    snapshot = h.core.group("g")
    assert [m.member_id for m in snapshot.members] == [leader]  # type: ignore[union-attr]


def test_a_leave_that_removes_nobody_does_not_rebalance() -> None:
    h = Harness()
    static_stable(h)
    n = len(h.events_of(RebalanceStarted))
    r = h.leave("g", ("m-unknown", None))
    assert r.members == (LeftMember("m-unknown", None, E.unknown_member_id),)
    assert len(h.events_of(RebalanceStarted)) == n
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def test_admin_removal_by_instance_id_leaves_and_rebalances() -> None:
    h = Harness()
    _leader, follower, _gen = static_stable(h)
    r = h.leave("g", ("", "i2"))  # KIP-345: AdminClient.removeMembersFromConsumerGroup
    assert r == LeaveGroupResult(E.none, (LeftMember("", "i2", E.none),))
    left = h.events_of(MemberLeft)[-1]
    assert (left.member_id, left.group_instance_id, left.reason) == (
        follower,
        "i2",
        LeaveReason.LEFT,
    )
    started = h.events_of(RebalanceStarted)[-1]
    trigger = RebalanceTrigger(follower, "i2", left.client_id, left.client_host)
    assert left.client_id and left.client_host  # the trigger names the member that left
    assert started == RebalanceStarted("g", RebalanceCause.MEMBER_LEFT, follower, h.now, trigger)
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]


def test_a_pending_member_leaving_lets_the_join_complete_at_once() -> None:
    h = Harness()
    ids, leader, gen = h.stable_group("g", n=2)
    pending = h.call(h.join_cmd("g"))  # a third client: MEMBER_ID_REQUIRED, not joined yet
    assert pending.error is E.member_id_required
    rts = [h.join("g", m) for m in ids]  # both members rejoin: the group waits for the pending one
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    assert [h.reply(rt) for rt in rts] == [None, None]
    r = h.leave("g", (pending.member_id, None))
    assert r == LeaveGroupResult(E.none, (LeftMember(pending.member_id, None, E.none),))
    replies = [h.reply(rt) for rt in rts]  # answered in the same step, not at the timeout
    assert all(x is not None and x.error is E.none for x in replies), replies
    assert {x.generation_id for x in replies} == {gen + 1}
    assert replies[0].leader == leader

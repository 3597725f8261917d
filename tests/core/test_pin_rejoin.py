"""A JoinGroup from a member the group already has (Kafka's classicGroupJoinExistingMember,
docs/protocol.md §5.4), pinned whole: the repeated join answered with the current generation, the
rebalance a changed subscription starts (and who started it), and the pending member that
claims a group.instance.id.

Written for mutation testing (issue 28, `make mutation`): each test fails on a change that the
rest of the suite let through.
"""

from __future__ import annotations

from coordinator.core.events import MemberJoined, RebalanceCause, RebalanceStarted, RebalanceTrigger
from coordinator.core.messages import ErrorCode as E
from coordinator.core.messages import JoinGroupResult
from tests.support.fakeclock import Harness, subscription


def test_a_repeated_join_from_a_follower_gets_the_current_generation() -> None:
    h = Harness()
    ids, leader, gen = h.stable_group("g", n=2)
    follower = next(m for m in ids if m != leader)
    r = h.call(h.join_cmd("g", follower))
    assert r == JoinGroupResult(E.none, gen, "consumer", "range", leader, False, follower, ())


def test_a_changed_subscription_starts_a_rebalance_named_after_its_member() -> None:
    h = Harness()
    ids, leader, _gen = h.stable_group("g", n=2)
    follower = next(m for m in ids if m != leader)
    both = (("range", subscription("orders", "payments")),)
    h.join("g", follower, protocols=both)
    joined = next(e for e in h.events_of(MemberJoined) if e.member_id == follower)
    trigger = RebalanceTrigger(follower, None, joined.client_id, joined.client_host)
    assert h.events_of(RebalanceStarted)[-1] == RebalanceStarted(
        "g", RebalanceCause.PROTOCOL_CHANGED, follower, h.now, trigger
    )


def test_a_pending_member_may_not_claim_an_instance_id() -> None:
    h = Harness()
    h.stable_group("g", n=1)
    pending = h.call(h.join_cmd("g"))
    assert pending.error is E.member_id_required
    r = h.call(h.join_cmd("g", pending.member_id, instance="i9"))
    assert r == JoinGroupResult(E.unknown_server_error, member_id=pending.member_id)

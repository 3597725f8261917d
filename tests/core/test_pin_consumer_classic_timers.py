"""A classic member's timers in a KIP-848 consumer group as its JoinGroup sets them (Kafka's
classicGroupJoinToConsumerGroup: the session timeout is the member's own, and a rejoin cancels
the join timeout its Heartbeat's REBALANCE_IN_PROGRESS started), and JoinGroups the consumer core
must answer whatever the member's state: one before the group's paced run gave it a target, and
one from a member in a state only a newer version writes (UNKNOWN: it gives up what it owned);
its sync timeout; and what its JoinGroup answer says. Pinned where `make mutation` found them
loose."""

from __future__ import annotations

from coordinator.core.consumer import ConsumerGroupConfig, classic
from coordinator.core.consumer.messages import MemberRemoved
from coordinator.core.consumer.model import MemberState, replace_member
from coordinator.core.consumer.record_helpers import current_assignment_record
from coordinator.core.messages import ErrorCode, Heartbeat, SyncGroup
from tests.core.test_consumer_support import Harness
from tests.core.test_pin_consumer_classic_member import classic_heartbeat, classic_join

SESSION_MS = 6_000  # classic_join's session timeout
REBALANCE_MS = 20_000  # and rebalance timeout


def test_a_classic_member_silent_for_its_own_session_timeout_is_fenced() -> None:
    h = Harness()  # the consumer members' session timeout is 45 s: the classic member's is 6 s
    h.client("n1")
    h.settle()
    joined_at = h.clock.now
    mid = classic_join(h).member_id
    h.events.clear()
    h.advance(SESSION_MS - 1)
    assert mid in h.group.members
    h.advance(1)
    assert mid not in h.group.members
    removed = [e for e in h.events if isinstance(e, MemberRemoved)]
    assert [(e.member_id, e.reason) for e in removed] == [(mid, "session_expired")]
    assert h.clock.now == joined_at + SESSION_MS


def test_a_rejoin_cancels_the_join_timeout_its_heartbeat_started() -> None:
    h = Harness()
    n1, n2 = h.client("n1"), h.client("n2")
    h.settle()
    joined = classic_join(h)  # waits for one partition from n1 and one from n2
    mid = joined.member_id
    h.poll(n1)
    h.poll(n1)
    joined = classic_join(h, mid)  # takes n1's, still waits for n2's
    h.poll(n2)
    h.poll(n2)  # released: the heartbeat tells it to rejoin, which starts its join timeout
    assert classic_heartbeat(h, joined) is ErrorCode.rebalance_in_progress
    rejoined = classic_join(h, mid)  # at once: the same epoch, now STABLE
    assert rejoined.generation_id == joined.generation_id
    assert h.group.members[mid].state is MemberState.STABLE
    sync = SyncGroup("g", rejoined.generation_id, mid, None, "consumer", "range", (), 5)
    assert classic.sync(h.core, sync, h.clock.now).error is ErrorCode.none
    for _ in range(2 * REBALANCE_MS // 3_000):  # it heartbeats within its session timeout
        h.advance(3_000)
        h.poll(n1)
        h.poll(n2)
        assert classic_heartbeat(h, rejoined) is ErrorCode.none
    assert mid in h.group.members


def test_a_classic_join_before_the_groups_paced_run_is_answered_with_nothing_yet() -> None:
    h = Harness(config=ConsumerGroupConfig(assignment_interval_ms=1_000))
    h.client("n1")
    h.settle()
    h.poll(h.client("n2"))  # a run at once; the next bump waits for the interval's end
    joined = classic_join(h)
    member = h.group.members[joined.member_id]
    assert joined.member_id not in h.group.target_assignment
    assert joined.generation_id == member.member_epoch and not member.assigned_partitions


def test_a_classic_member_in_an_unknown_state_rejoins_having_given_up_its_partitions() -> None:
    h = Harness()
    n1 = h.client("n1")
    h.settle()
    mid = classic_join(h).member_id
    h.poll(n1)
    h.poll(n1)
    classic_join(h, mid)
    member = h.group.members[mid]
    assert member.assigned_partitions
    # A newer coordinator wrote a state this one does not know (MemberState.UNKNOWN).
    unknown = replace_member(member, state=MemberState.UNKNOWN)
    h.core.replay(current_assignment_record("g", unknown))
    assert h.group.members[mid].state is MemberState.UNKNOWN
    joined = classic_join(h, mid, owned=(0, 1))  # whatever it reports owning
    member = h.group.members[mid]
    assert member.state is not MemberState.UNKNOWN
    assert joined.generation_id == member.member_epoch == h.group.assignment_epoch


def test_a_classic_member_that_never_syncs_is_fenced_after_its_rebalance_timeout() -> None:
    """Kafka's consumerGroupSyncKey: the JoinGroup answer starts a sync timeout at the member's
    epoch; heartbeats do not stop it, only a SyncGroup does."""
    h = Harness()
    h.client("n1")
    h.settle()
    joined_at = h.clock.now
    joined = classic_join(h)
    mid = joined.member_id
    h.events.clear()
    while h.clock.now + 3_000 < joined_at + REBALANCE_MS:
        h.advance(3_000)
        assert classic_heartbeat(h, joined) in (ErrorCode.none, ErrorCode.rebalance_in_progress)
    h.advance(joined_at + REBALANCE_MS - 1 - h.clock.now)
    assert mid in h.group.members
    h.advance(1)
    assert mid not in h.group.members
    removed = [e for e in h.events if isinstance(e, MemberRemoved)]
    assert [(e.member_id, e.reason) for e in removed] == [(mid, "rebalance_timeout")]


def test_classic_requests_naming_a_consumer_protocol_member_are_unknown_member() -> None:
    """Kafka's throwIfMemberDoesNotUseClassicProtocol: UNKNOWN_MEMBER_ID."""
    h = Harness()
    h.client("n1")
    h.settle()
    classic_join(h)  # the group has a classic member too
    epoch = h.group.members["n1"].member_epoch
    sync = SyncGroup("g", epoch, "n1", None, "consumer", "range", (), 5)
    assert classic.sync(h.core, sync, h.clock.now).error is ErrorCode.unknown_member_id
    beat = classic.heartbeat(h.core, Heartbeat("g", epoch, "n1", None), h.clock.now)
    assert beat.error is ErrorCode.unknown_member_id


def test_a_classic_members_join_answer_makes_it_a_follower_with_no_member_list() -> None:
    h = Harness()
    h.client("n1")
    h.settle()
    joined = classic_join(h)
    assert (joined.leader, joined.skip_assignment, joined.members) == ("", False, ())
    assert (joined.protocol_type, joined.protocol_name) == ("consumer", "range")

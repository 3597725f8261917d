"""An online upgrade of a classic group in the middle of a rebalance, pinned where `make
mutation` found it loose (issue 36: `handlers/migration.finish_upgrade`): the JoinGroups and
SyncGroups the classic group had parked are answered REBALANCE_IN_PROGRESS at once, each under
its own request with its member id (Kafka's convertToConsumerGroup completes them so the
members rejoin the consumer group), and static members join the consumer group under their
instance ids. The flows are in test_consumer_migration.py, whose helpers these reuse.
"""

from __future__ import annotations

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat, HeartbeatResponse
from coordinator.core.coordinator import Effects
from coordinator.core.events import MemberJoined
from coordinator.core.group import GroupState
from coordinator.core.messages import (
    ErrorCode,
    JoinGroupResult,
    SyncAssignment,
    SyncGroup,
    SyncGroupResult,
)
from tests.core.test_consumer_migration import REBALANCE_MS, Classic, T, classic_group, core

E = ErrorCode


def upgrade(c: object, now: int) -> Effects:
    cmd = ConsumerGroupHeartbeat("g", "n1", 0, rebalance_timeout_ms=REBALANCE_MS,
                                 subscribed_topic_names=(T,), topic_partitions=())  # fmt: skip
    fx: Effects = c.handle(99, cmd, now)  # type: ignore[attr-defined]
    return fx


def test_an_upgrade_answers_a_parked_join_under_its_own_request() -> None:
    c = core()
    clients = classic_group(c, 2)
    c.handle(30, clients[0].join_cmd(), 1)  # c0 rejoins: parked, waiting for c1
    assert c.state.groups["g"].state is GroupState.PREPARING_REBALANCE
    fx = upgrade(c, 2)
    replies = dict(fx.replies)
    assert replies[30] == JoinGroupResult(E.rebalance_in_progress, member_id=clients[0].member_id)
    assert sorted(replies) == [30, 99]
    assert isinstance(replies[99], HeartbeatResponse) and replies[99].error is E.none


def test_an_upgrade_answers_a_parked_sync_under_its_own_request() -> None:
    c = core()
    clients = [Classic(c, f"c{i}") for i in range(2)]
    for i, cl in enumerate(clients):
        c.handle(10 + i, cl.join_cmd(), 0)
    for reply_to, result in c.expire(0).replies:  # the join phase ends: CompletingRebalance
        assert isinstance(result, JoinGroupResult)
        clients[reply_to - 10].joined(result)
    group = c.state.groups["g"]
    assert group.state is GroupState.COMPLETING_REBALANCE
    follower = next(cl for cl in clients if cl.member_id != group.leader_id)
    parked = SyncGroup("g", follower.generation, follower.member_id, None, "consumer",
                       follower.protocol, (), 5)  # fmt: skip
    assert not c.handle(40, parked, 1).replies  # waits for the leader's assignments
    fx = upgrade(c, 2)
    replies = dict(fx.replies)
    assert replies[40] == SyncGroupResult(E.rebalance_in_progress)
    assert sorted(replies) == [40, 99]
    # The leader's own SyncGroup now goes to the consumer group (no parked reply left behind).
    leader = next(cl for cl in clients if cl.member_id == group.leader_id)
    late = SyncGroup("g", leader.generation, leader.member_id, None, "consumer", leader.protocol,
                     (SyncAssignment(follower.member_id, b""),), 5)  # fmt: skip
    assert [rt for rt, _ in c.handle(41, late, 3).replies] == [41]


def test_static_members_join_the_upgraded_group_under_their_instance_ids() -> None:
    c = core()
    clients = classic_group(c, 2, static=True)
    fx = upgrade(c, 5)
    joined = [e for e in fx.events if isinstance(e, MemberJoined)]
    assert joined[:2] == [
        MemberJoined("g", clients[0].member_id, "c0", "c0", "/h"),
        MemberJoined("g", clients[1].member_id, "c1", "c1", "/h"),
    ]

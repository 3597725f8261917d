"""What an online upgrade (a classic group becomes a KIP-848 consumer group) and a downgrade (the
other way) tell the history and write, pinned where `make mutation` found them loose (issue 36:
`handlers/migration.finish_upgrade` and `maybe_downgrade`): the group replaced is deleted and
created again, each converted member joins under its own ids, the members keep their client ids
and their own session timeouts, and the classic group written is a consumer-protocol group.
The flows themselves are in test_consumer_migration.py, whose helpers these reuse.
"""

from __future__ import annotations

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.consumer.timers import TimerKind
from coordinator.core.events import (
    GroupCreated,
    GroupDeleted,
    MemberJoined,
    RebalanceCause,
    RebalanceStarted,
)
from coordinator.core.group import GroupState
from coordinator.core.records import GroupMetadataKey
from tests.core.test_consumer_migration import SESSION_MS, T, classic_group, consumer_join, core


def test_an_upgrade_replaces_the_group_and_names_each_converted_member() -> None:
    c = core()
    clients = classic_group(c, 2)
    _, fx = consumer_join(c, "n1", 5)
    assert fx.events[:5] == [
        GroupDeleted("g"),
        GroupCreated("g"),
        MemberJoined("g", clients[0].member_id, None, "c0", "/h"),
        MemberJoined("g", clients[1].member_id, None, "c1", "/h"),
        MemberJoined("g", "n1", None, "", ""),
    ]
    timers = c.consumer.timers
    for cl in clients:  # their own session timeout, from the upgrade
        assert timers.deadline_of(TimerKind.SESSION, "g", cl.member_id) == 5 + SESSION_MS


def test_a_downgrade_replaces_the_group_with_a_classic_one_that_rebalances() -> None:
    c = core()
    clients = classic_group(c, 2)
    consumer_join(c, "n1", 5)
    fx = c.handle(1, ConsumerGroupHeartbeat("g", "n1", -1), 7)
    assert fx.events[2:] == [
        GroupDeleted("g"),
        GroupCreated("g"),
        MemberJoined("g", clients[0].member_id, None, "c0", "/h"),
        MemberJoined("g", clients[1].member_id, None, "c1", "/h"),
        RebalanceStarted("g", RebalanceCause.MEMBER_LEFT, None, 7),
    ]
    group = c.state.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE
    assert (group.protocol_type, group.subscribed_topics) == ("consumer", frozenset({T}))
    assert [(m.member_id, m.client_id, m.client_host) for m in group.members.values()] == [
        (cl.member_id, f"c{i}", "/h") for i, cl in enumerate(clients)]  # fmt: skip
    (written,) = [r for r in fx.records if isinstance(r.key, GroupMetadataKey)]
    assert written.value is not None and written.value.protocol_type == "consumer"
    assert written.value.current_state_timestamp_ms == c.state.wall(7)
    assert c.consumer.timers.deadline_of(TimerKind.SESSION, "g", clients[0].member_id) is None


def test_the_migration_policy_allows_each_direction_on_its_own() -> None:
    from tests.core.test_consumer_migration import Classic, reply

    def downgraded(policy: str) -> bool:
        c = core(policy)
        consumer_join(c, "n1", 0)
        Classic(c, "cl").rejoin(0)  # a classic member joins the consumer group
        c.handle(1, ConsumerGroupHeartbeat("g", "n1", -1), 5)  # the last consumer member leaves
        return "g" in c.state.groups and "g" not in c.consumer.groups

    assert downgraded("downgrade") and downgraded("bidirectional")
    assert not downgraded("upgrade") and not downgraded("disabled")
    c = core("downgrade")
    classic_group(c, 2)
    cmd = ConsumerGroupHeartbeat("g", "n1", 0, rebalance_timeout_ms=20_000,
                                 subscribed_topic_names=(T,), topic_partitions=())  # fmt: skip
    refused = reply(c.handle(1, cmd, 5))
    assert refused.error_message == (  # type: ignore[attr-defined]
        "Cannot upgrade classic group g to consumer group because the online upgrade is disabled.")


def test_a_classic_join_to_a_consumer_group_is_answered_under_its_request_and_timed() -> None:
    from tests.core.test_consumer_migration import Classic

    c = core()
    consumer_join(c, "n1", 0)
    fx = c.handle(9, Classic(c, "cl").join_cmd(), 1_234)
    ((reply_to, _),) = fx.replies
    assert reply_to == 9
    started = [e for e in fx.events if isinstance(e, RebalanceStarted)]
    assert [(e.group_id, e.now_ms) for e in started] == [("g", 1_234)]

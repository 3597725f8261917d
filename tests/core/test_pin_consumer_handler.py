"""ConsumerGroupHeartbeat in the core beside the other kinds of group, and the consumer groups'
events as the core's, pinned where `make mutation` found them loose (issue 36:
`handlers/consumer.heartbeat`, `expire`, `_event` and `_trigger`): the answers while loading and
to a share group's id, an Empty classic group giving way (its tombstone, deleted then created),
each event naming the member whole (instance id, client id and host, the topics that triggered
a rebalance) at the instant it happened, and a refused leave or a classic rejoin that
replaces nobody downgrades nothing (`classic_in_consumer.join`).
Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat, HeartbeatResponse
from coordinator.core.coordinator import GroupCoordinator
from coordinator.core.events import (
    GroupCreated,
    GroupDeleted,
    LeaveReason,
    MemberJoined,
    MemberLeft,
    RebalanceCause,
    RebalanceStarted,
    RebalanceTrigger,
)
from coordinator.core.messages import ErrorCode as E
from coordinator.core.messages import LeaveGroup, LeavingMember
from coordinator.core.records import GroupMetadataKey, Record
from tests.core.test_consumer_migration import Classic, consumer_join, core
from tests.core.test_pin_group_kinds_admin import share_group
from tests.support.fakeclock import Harness


def join_cmd(gid: str, mid: str, instance: str | None = None) -> ConsumerGroupHeartbeat:
    return ConsumerGroupHeartbeat(gid, mid, 0, instance_id=instance, rebalance_timeout_ms=5_000,
                                  subscribed_topic_names=("payments",), topic_partitions=(),
                                  client_id="app", client_host="/10.0.0.9")  # fmt: skip


def test_a_heartbeat_while_loading_is_answered_load_in_progress() -> None:
    h = Harness()
    h.core.loading = True
    h.join("g")  # another request first: the answer goes to the heartbeat's own reply_to
    assert h.call(join_cmd("cg", "m1")) == HeartbeatResponse(E.coordinator_load_in_progress)


def test_a_heartbeat_to_a_share_group_s_id_is_group_id_not_found_with_kafka_s_message() -> None:
    h = Harness()
    share_group(h, "sg", leave=False)
    before = (len(h.records), len(h.events))
    assert h.call(join_cmd("sg", "m1")) == HeartbeatResponse(
        E.group_id_not_found, "Group sg is not a consumer group.")  # fmt: skip
    assert (len(h.records), len(h.events)) == before


def test_an_empty_classic_group_gives_way_deleted_then_created() -> None:
    h = Harness()
    h.commit("simple", {("payments", 0): 1})
    assert "simple" in h.core.state.groups
    records, events = len(h.records), len(h.events)
    assert h.call(join_cmd("simple", "m1")).error is E.none
    assert h.records[records] == Record(GroupMetadataKey("simple"), None)
    assert h.events[events : events + 2] == [GroupDeleted("simple"), GroupCreated("simple")]
    assert "simple" not in h.core.state.groups


def test_the_events_name_the_member_whole_at_the_instant_they_happened() -> None:
    h = Harness()
    h.now = 2_000
    assert h.call(join_cmd("cg", "m1", "i1")).error is E.none
    trigger = RebalanceTrigger("m1", "i1", "app", "/10.0.0.9")
    assert [e for e in h.events if isinstance(e, MemberJoined | RebalanceStarted)] == [
        MemberJoined("cg", "m1", "i1", "app", "/10.0.0.9"),
        RebalanceStarted("cg", RebalanceCause.MEMBER_JOINED, "m1", 2_000, trigger),
    ]
    h.call(join_cmd("cg", "m2"))  # a second member, so the group rebalances when m1 goes
    h.events.clear()
    h.advance(60_000)  # m1's session expires (m2 too, later): each rebalance at its instant
    left = [e for e in h.events if isinstance(e, MemberLeft)]
    assert left[0] == MemberLeft("cg", "m1", "i1", LeaveReason.EXPIRED, "app", "/10.0.0.9")
    started = [e for e in h.events if isinstance(e, RebalanceStarted)]
    assert started[0].member_id == "m1" and started[0].now_ms == 2_000 + 45_000


def test_a_rebalance_for_a_topic_change_names_the_topic() -> None:
    h = Harness()
    epoch = h.call(join_cmd("cg", "m1")).member_epoch
    info = h.catalog.get("payments")
    assert info is not None
    h.catalog.put(info.with_partitions(info.partitions + 2))
    h.absorb(h.core.topic_changed("payments", h.catalog.get("payments"), h.now))
    h.events.clear()
    h.now += 100
    h.call(ConsumerGroupHeartbeat("cg", "m1", epoch))  # its next heartbeat sees the change
    (started,) = h.events_of(RebalanceStarted)
    assert started.trigger.topics == ("payments",) and started.now_ms == h.now


def test_a_leave_of_a_static_member_names_its_host() -> None:
    h = Harness()
    h.call(join_cmd("cg", "m1", "i1"))
    h.call(ConsumerGroupHeartbeat("cg", "m1", -1))
    (left,) = h.events_of(MemberLeft)
    assert left == MemberLeft("cg", "m1", "i1", LeaveReason.LEFT, "app", "/10.0.0.9")


def classic_only_consumer_group() -> tuple[GroupCoordinator, list[Classic]]:
    """A consumer group left with classic members only, kept (there were more than
    group.max.size), then one fewer: two classic members, within the limit, still a consumer
    group (only a fence decides a downgrade)."""
    c = core(max_group_size=2)
    consumer_join(c, "n1", 0)
    classic = [Classic(c, f"c{i}") for i in range(3)]
    for cl in classic:
        cl.rejoin(1)
    c.handle(1, ConsumerGroupHeartbeat("g", "n1", -1), 2)  # three classic members: no downgrade
    assert "g" in c.consumer.groups
    c.handle(1, LeaveGroup("g", (LeavingMember(classic[2].member_id, None),), 3), 3)
    return c, classic[:2]


def test_a_refused_leave_downgrades_nothing() -> None:
    c, _ = classic_only_consumer_group()
    fx = c.handle(1, ConsumerGroupHeartbeat("g", "ghost", -1), 4)
    ((_, response),) = fx.replies
    assert isinstance(response, HeartbeatResponse) and response.error is E.unknown_member_id
    assert not fx.records and "g" in c.consumer.groups and "g" not in c.state.groups


def test_a_classic_rejoin_that_replaces_nobody_downgrades_nothing() -> None:
    c, classic = classic_only_consumer_group()
    classic[0].rejoin(4)
    assert "g" in c.consumer.groups and "g" not in c.state.groups

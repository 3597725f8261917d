"""ShareGroupHeartbeat / ShareGroupDescribe in the pure core (KIP-932), pinned whole where
mutation testing found them loose (issue 36, `make mutation`): every refusal's message (Kafka
4.4's GroupMetadataManager words), and ShareGroupDescribe's answers compared as values (every
field of the group and its members). Fake clock, no server.
"""

from __future__ import annotations

import uuid

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.events import GroupCreated, LeaveReason, MemberJoined, MemberLeft
from coordinator.core.messages import ErrorCode as E
from coordinator.core.records import Record
from coordinator.core.share.coordinator import ShareGroupCoordinator
from coordinator.core.share.group_configs import GroupConfigKey
from coordinator.core.share.messages import (
    DescribedShareGroup,
    DescribedShareMember,
    ShareGroupConfig,
    ShareGroupDescribe,
    ShareGroupHeartbeat,
    ShareHeartbeatResponse,
)
from coordinator.core.share.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupMemberMetadataKey,
    ShareGroupTargetAssignmentMemberKey,
)
from coordinator.core.topics import TopicCatalog, TopicInfo
from tests.support.fakeclock import Harness

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def coordinator(**config: int) -> ShareGroupCoordinator:
    topics = TopicCatalog([TopicInfo("t1", T1, 1), TopicInfo("t2", T2, 2)])
    return ShareGroupCoordinator(ShareGroupConfig(**config), topics)  # type: ignore[arg-type]


def beat(c: ShareGroupCoordinator, member: str, epoch: int, topics: tuple[str, ...] | None = None,
         rack: str | None = None) -> ShareHeartbeatResponse:
    req = ShareGroupHeartbeat("g", member, epoch, rack, topics, "cid", "/10.0.0.1")
    return c.heartbeat(req, 0).response


def test_refusals_say_why_in_kafkas_words() -> None:
    c = coordinator(max_size=2)
    assert beat(c, "m1", 1) == ShareHeartbeatResponse(
        E.group_id_not_found, "Share group g not found.")
    beat(c, "m1", 0, ("t1",))
    assert beat(c, "m2", 4) == ShareHeartbeatResponse(
        E.unknown_member_id, "Member m2 is not a member of group g.")
    beat(c, "m2", 0, ("t1",))
    assert beat(c, "m3", 0, ("t1",)) == ShareHeartbeatResponse(
        E.group_max_size_reached, "The share group has reached its maximum capacity of 2 members.")
    beat(c, "m1", 1)  # m1: epoch 2, previous 1
    assert beat(c, "m1", 7) == ShareHeartbeatResponse(E.fenced_member_epoch, (
        "The share group member has a greater member epoch (7) than the one known by the group "
        "coordinator (2). The member must abandon all its partitions and rejoin."))
    # m2 leaves: the group epoch moves on; m1 keeps (2, 1) until it heartbeats.
    assert beat(c, "m2", -1) == ShareHeartbeatResponse(E.none, member_id="m2", member_epoch=-1)
    assert c.groups["g"].members["m1"].member_epoch == 2
    beat(c, "m1", 2)  # m1: epoch 3, previous 2
    assert beat(c, "m1", 1) == ShareHeartbeatResponse(E.fenced_member_epoch, (
        "The share group member has a smaller member epoch (1) than the one known by the group "
        "coordinator (3), and it does not match the previous member epoch (2). The member must "
        "abandon all its partitions and rejoin."))
    assert beat(c, "x", -1, ()) == ShareHeartbeatResponse(
        E.unknown_member_id, "Member x is not a member of group g.")
    leave = ShareGroupHeartbeat("other", "m1", -1)
    assert c.heartbeat(leave, 0).response == ShareHeartbeatResponse(
        E.group_id_not_found, "Group other not found.")


def test_a_share_partition_is_made_once_from_its_start_offset() -> None:
    c = coordinator()
    part = c.share_partition("g", T1, 0, 42)
    assert (part.start_offset, part.next_fetch_offset()) == (42, 42)
    part.acquire("m1", [(42, 50)], 0, max_records=100)
    assert c.share_partition("g", T1, 0) is part and c.partitions == {("g", T1, 0): part}


def test_a_config_tombstone_of_a_group_without_configs_changes_nothing() -> None:
    c = coordinator()
    c.replay_group_config(GroupConfigKey("g"), None)
    assert c.group_configs == {} and c.partition_config("g") == c.config.partition


def test_describe_answers_every_field() -> None:
    c = coordinator()
    beat(c, "m1", 0, ("t1", "t2", "gone"), rack="r1")
    beat(c, "m2", 0, ("t2",))
    c.topics.remove("t1")  # a topic missing from the metadata is left out of an assignment
    got = c.describe(ShareGroupDescribe(("g", "nope", "classic")), other_type=["classic"])
    m1 = DescribedShareMember("m1", "r1", 1, "cid", "/10.0.0.1", ("gone", "t1", "t2"),
                              ((T2, "t2", (0, 1)),))
    m2 = DescribedShareMember("m2", None, 2, "cid", "/10.0.0.1", ("t2",), ((T2, "t2", (1,)),))
    assert got.groups == (
        DescribedShareGroup("g", E.none, None, "Stable", 2, 2, "simple", (m1, m2)),
        DescribedShareGroup("nope", E.group_id_not_found, "Group nope not found."),
        DescribedShareGroup("classic", E.group_id_not_found, "Group classic is not a share group."),
    )  # fmt: skip


# -- inside the core (coordinator.core.handlers.share) ---------------------------------------------


def test_the_core_answers_share_heartbeats_with_history_events() -> None:
    h = Harness(topics=(("t1", 1),))
    joined = h.call(ShareGroupHeartbeat("g", "m1", 0, None, ("t1",), "cid", "/10.0.0.1"))
    assert (joined.error, joined.member_epoch) == (E.none, 1)
    h.call(ShareGroupHeartbeat("g", "m2", 0, None, ("t1",), "c2", "/10.0.0.2"))
    h.call(ShareGroupHeartbeat("g", "m1", 1))  # a known member: no event
    h.call(ShareGroupHeartbeat("g", "m2", -1))
    share = h.core.share.config
    h.advance(share.session_timeout_ms)  # m1 expires
    assert h.events == [
        GroupCreated("g"),
        MemberJoined("g", "m1", None, "cid", "/10.0.0.1"),
        MemberJoined("g", "m2", None, "c2", "/10.0.0.2"),
        MemberLeft("g", "m2", None, LeaveReason.LEFT),
        MemberLeft("g", "m1", None, LeaveReason.EXPIRED),
    ]
    # The fence's records (tombstones, the group epoch, the assignment epoch) went to the log.
    assert h.records[-5:-2] == [
        Record(ShareGroupCurrentMemberAssignmentKey("g", "m1"), None),
        Record(ShareGroupTargetAssignmentMemberKey("g", "m1"), None),
        Record(ShareGroupMemberMetadataKey("g", "m1"), None),
    ]
    assert h.core.share.groups["g"].members == {}


def test_the_core_refuses_other_group_kinds_ids_and_answers_while_loading() -> None:
    h = Harness()
    h.commit("classic", {("orders", 0): 5})  # an Empty classic group holding offsets
    h.call(ConsumerGroupHeartbeat("consumer", "c1", 0, rebalance_timeout_ms=30_000,
                                  subscribed_topic_names=("orders",), topic_partitions=()))
    for gid in ("classic", "consumer"):
        assert h.call(ShareGroupHeartbeat(gid, "m1", 0, None, ("orders",))) == (
            ShareHeartbeatResponse(E.group_id_not_found, f"Group {gid} is not a share group."))
    described = h.call(ShareGroupDescribe(("classic", "consumer", ""))).groups
    assert described == (
        DescribedShareGroup("classic", E.group_id_not_found, "Group classic is not a share group."),
        DescribedShareGroup("consumer", E.group_id_not_found,
                            "Group consumer is not a share group."),
        DescribedShareGroup("", E.invalid_group_id),
    )  # fmt: skip
    # An empty group id goes on to the share coordinator's own check.
    assert h.call(ShareGroupHeartbeat("", "m1", 0, None, ("orders",))).error == E.invalid_request
    h.call(ShareGroupHeartbeat("g", "m1", 0, None, ("orders",)))
    events = len(h.events)
    h.core.loading = True
    assert h.call(ShareGroupHeartbeat("g", "m1", 1)) == ShareHeartbeatResponse(
        E.coordinator_load_in_progress)
    assert h.call(ShareGroupDescribe(("g", "x"))).groups == (
        DescribedShareGroup("g", E.coordinator_load_in_progress),
        DescribedShareGroup("x", E.coordinator_load_in_progress))
    h.absorb(h.core.expire(h.now + h.core.share.config.session_timeout_ms))  # none expires
    assert "m1" in h.core.share.groups["g"].members and len(h.events) == events

"""ShareGroupHeartbeat / ShareGroupDescribe in the pure core (KIP-932), pinned whole where
mutation testing found them loose (issue 36, `make mutation`): every refusal's message (Kafka
4.4's GroupMetadataManager words), and ShareGroupDescribe's answers compared as values (every
field of the group and its members). Fake clock, no server.
"""

from __future__ import annotations

import uuid

from coordinator.core.messages import ErrorCode as E
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
from coordinator.core.topics import TopicCatalog, TopicInfo

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

"""ShareGroupHeartbeat / ShareGroupDescribe in the pure core (KIP-932), pinned whole where
mutation testing found them loose (issue 36, `make mutation`): every refusal's message (Kafka
4.4's GroupMetadataManager words), and ShareGroupDescribe's answers compared as values (every
field of the group and its members). Fake clock, no server.
"""

from __future__ import annotations

import uuid

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.consumer.records import TopicPartitions
from coordinator.core.events import GroupCreated, LeaveReason, MemberJoined, MemberLeft
from coordinator.core.messages import ErrorCode as E
from coordinator.core.records import Record
from coordinator.core.share.coordinator import ShareGroupCoordinator
from coordinator.core.share.group_configs import GroupConfigKey, GroupConfigValue
from coordinator.core.share.messages import (
    DescribedShareGroup,
    DescribedShareMember,
    ShareGroupConfig,
    ShareGroupDescribe,
    ShareGroupHeartbeat,
    ShareHeartbeatResponse,
    ShareRecord,
)
from coordinator.core.share.persisted import RecordState, ShareSnapshot, StateBatch
from coordinator.core.share.records import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
)
from coordinator.core.share.state_records import SharePartitionStateKey, SharePartitionStateValue
from coordinator.core.topichash import HASH_FUNCTIONS, group_hash, topic_hash
from coordinator.core.topics import TopicCatalog, TopicInfo
from tests.support.fakeclock import Harness

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)


def coordinator(**config: int | str) -> ShareGroupCoordinator:
    topics = TopicCatalog([TopicInfo("t1", T1, 1), TopicInfo("t2", T2, 2)])
    return ShareGroupCoordinator(ShareGroupConfig(**config), topics)  # type: ignore[arg-type]


def beat(c: ShareGroupCoordinator, member: str, epoch: int, topics: tuple[str, ...] | None = None,
         rack: str | None = None) -> ShareHeartbeatResponse:
    req = ShareGroupHeartbeat("g", member, epoch, rack, topics, "cid", "/10.0.0.1")
    return c.heartbeat(req, 0).response


def test_refusals_say_why_in_kafkas_words() -> None:
    c = coordinator(max_size=2)
    joined = coordinator().heartbeat(ShareGroupHeartbeat("g", "m1", 0, None, ("t1",)), 0)
    assert joined.response == ShareHeartbeatResponse(
        E.none, None, "m1", 1, 5000, (TopicPartitions(T1, (0,)),))
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
    assert h.records[0].value is not None  # the member's metadata, written whole


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


# -- membership records and their replay ----------------------------------------------------------


def test_a_member_keeps_its_rack_until_it_sends_another_and_replay_restores_it() -> None:
    c = coordinator()
    log = c.heartbeat(ShareGroupHeartbeat("g", "m1", 0, "r1", ("t1",), "cid", "/h"), 0).records
    log += c.heartbeat(ShareGroupHeartbeat("g", "m1", 1, None, None, "cid", "/h"), 0).records
    assert c.groups["g"].members["m1"].rack_id == "r1"
    log += c.heartbeat(ShareGroupHeartbeat("g", "m1", 1, "r2", None, "cid", "/h"), 0).records
    assert c.groups["g"].members["m1"].rack_id == "r2"
    rebuilt = coordinator()
    for record in log:
        rebuilt.replay(record)
    assert rebuilt.groups["g"].members == c.groups["g"].members
    # The current assignment record: the epochs, state 0 (STABLE, the only one of a share
    # member) and the partitions.
    assert log[-1] == ShareRecord(ShareGroupMemberMetadataKey("g", "m1"),
                                  ShareGroupMemberMetadataValue("r2", "cid", "/h", ("t1",)))
    assert ShareRecord(ShareGroupCurrentMemberAssignmentKey("g", "m1"),
                       ShareGroupCurrentMemberAssignmentValue(1, 0, 0, (TopicPartitions(T1, (0,)),))
                       ) in log  # fmt: skip


def test_an_unchanged_heartbeat_writes_nothing_and_a_new_subscription_bumps_the_epoch() -> None:
    c = coordinator()
    c.heartbeat(ShareGroupHeartbeat("g", "m1", 0, None, ("t1",), "cid", "/h"), 0)
    same = c.heartbeat(ShareGroupHeartbeat("g", "m1", 1, None, None, "cid", "/h"), 0)
    assert same.records == () and same.response.member_epoch == 1
    more = c.heartbeat(ShareGroupHeartbeat("g", "m1", 1, None, ("t1", "t2"), "cid", "/h"), 0)
    assert more.response.member_epoch == 2 and c.groups["g"].group_epoch == 2
    assert more.response.assignment == (TopicPartitions(T1, (0,)), TopicPartitions(T2, (0, 1)))
    assert more.records[0] == ShareRecord(ShareGroupMemberMetadataKey("g", "m1"),
                                          ShareGroupMemberMetadataValue(None, "cid", "/h",
                                                                        ("t1", "t2")))


def test_a_grown_topic_reaches_a_member_whose_heartbeat_changes_nothing_else() -> None:
    c = coordinator()
    c.heartbeat(ShareGroupHeartbeat("g", "m1", 0, None, ("t1",), "cid", "/h"), 0)
    c.topics.put(TopicInfo("t1", T1, 2))
    c.topic_changed("t1")
    grown = c.heartbeat(ShareGroupHeartbeat("g", "m1", 1, None, None, "cid", "/h"), 0).response
    assert grown.member_epoch == 2 and grown.assignment == (TopicPartitions(T1, (0, 1)),)


def test_a_fence_writes_the_remaining_members_hash_and_releases_partitions_in_order() -> None:
    c = coordinator()
    for m in ("m1", "m2"):
        c.heartbeat(ShareGroupHeartbeat("g", m, 0, None, ("t1", "t2"), "cid", "/h"), 0)
    metadata_hash = c.groups["g"].metadata_hash
    assert metadata_hash != 0
    # Made in the order T2 then T1: the updates still come by topic id, then partition.
    for key in (("g", T2, 1), ("g", T2, 0), ("g", T1, 0), ("other", T1, 0)):
        c.share_partition(*key).acquire("m2", [(0, 0)], 0, max_records=1)
    left = c.heartbeat(ShareGroupHeartbeat("g", "m2", -1), 0)
    assert left.records[3] == ShareRecord(ShareGroupMetadataKey("g"),
                                          ShareGroupMetadataValue(3, metadata_hash))
    assert [k for k, _ in left.partition_updates] == [("g", T1, 0), ("g", T2, 0), ("g", T2, 1)]
    assert "m2" not in c.groups["g"].targets and "m2" not in c.groups["g"].members


def test_replay_takes_tombstones_of_what_it_never_saw() -> None:
    # Compaction may have removed the value a tombstone deletes: replay goes on.
    c = coordinator()
    for key in (ShareGroupTargetAssignmentMemberKey("g", "m9"), ShareGroupMemberMetadataKey(
            "g", "m9"), ShareGroupCurrentMemberAssignmentKey("g", "m9")):  # fmt: skip
        c.heartbeat(ShareGroupHeartbeat("g", "m1", 0, None, ("t1",)), 0)
        c.replay(ShareRecord(key, None))
    assert set(c.groups["g"].members) == {"m1"} and set(c.groups["g"].targets) == {"m1"}
    c.replay_partition(SharePartitionStateKey("g", T1, 5), None)
    assert c.partitions == {}


def test_a_replayed_share_partition_takes_its_groups_config() -> None:
    c = coordinator()
    c.replay_group_config(GroupConfigKey("g"), GroupConfigValue((
        ("share.record.lock.duration.ms", "2000"),)))  # fmt: skip
    snapshot = ShareSnapshot(0, 3, 1, 10, 2, (
        StateBatch(10, 11, RecordState.ACKNOWLEDGED, 1),
        StateBatch(14, 15, RecordState.ARCHIVED, 2)))  # fmt: skip
    c.replay_partition(SharePartitionStateKey("g", T1, 0), SharePartitionStateValue(snapshot))
    part = c.partitions[("g", T1, 0)]
    assert part.config.record_lock_duration_ms == 2000 and part.state_epoch == 3
    assert part.snapshot().state_epoch == 3 and part.start_offset == 12
    # 12 and 13 lie between the batches: never delivered, so their first delivery counts 1.
    got = part.acquire("m1", [(12, 16)], 0, max_records=10).records
    assert [(r.first_offset, r.last_offset, r.delivery_count) for r in got] == [
        (12, 13, 1), (16, 16, 1)]
    assert part.next_deadline() == 2000


def test_unloading_a_group_forgets_only_its_members_partitions_and_configs() -> None:
    c = coordinator()
    c.heartbeat(ShareGroupHeartbeat("g", "m1", 0, None, ("t1",)), 0)
    c.heartbeat(ShareGroupHeartbeat("h", "m2", 0, None, ("t1",)), 1000)
    for gid in ("g", "h"):
        c.replay_group_config(GroupConfigKey(gid), GroupConfigValue((
            ("share.delivery.count.limit", "3"),)))  # fmt: skip
        c.share_partition(gid, T1, 0)
    c.unload_group("g")
    assert list(c.groups) == ["h"] and list(c.partitions) == [("h", T1, 0)]
    assert list(c.group_configs) == ["h"]
    assert c.partition_config("g") == c.config.partition
    assert c.partition_config("h").delivery_count_limit == 3
    assert c.next_deadline_ms() == 1000 + c.config.session_timeout_ms
    assert c.expire(1000 + c.config.session_timeout_ms)[0].response.member_id == "m2"


def test_the_isolation_level_is_the_groups() -> None:
    c = coordinator()
    assert not c.read_committed("g")
    c.replay_group_config(GroupConfigKey("g"), GroupConfigValue((
        ("share.isolation.level", " read_committed "),)))  # fmt: skip
    assert c.read_committed("g") and not c.read_committed("h")
    c.replay_group_config(GroupConfigKey("g"), GroupConfigValue((
        ("share.isolation.level", "read_uncommitted"),)))  # fmt: skip
    assert not c.read_committed("g")


# -- session timeouts after loading, and expiry --------------------------------------------------


def test_loaded_members_get_a_fresh_session_timeout_of_their_group() -> None:
    live = coordinator()
    log = []
    for gid, member in (("g", "m1"), ("h", "m2")):
        req = ShareGroupHeartbeat(gid, member, 0, None, ("t1",))
        log += live.heartbeat(req, 0).records
    loaded = coordinator()
    loaded.replay_group_config(GroupConfigKey("g"), GroupConfigValue((
        ("share.session.timeout.ms", "4000"),)))  # fmt: skip
    for record in log:
        loaded.replay(record)
    loaded.finish_loading(10_000, ["g"])  # only g's partition finished loading
    assert loaded.next_deadline_ms() == 14_000
    assert [r.response.member_id for r in loaded.expire(14_000)] == ["m1"]
    assert loaded.next_deadline_ms() is None  # h is not loaded yet: no session runs
    loaded.finish_loading(15_000, ["offsets-only"])  # a loaded group with no share records
    assert loaded.next_deadline_ms() is None
    loaded.finish_loading(20_000)
    assert loaded.next_deadline_ms() == 20_000 + loaded.config.session_timeout_ms



def test_a_topic_grown_while_the_group_was_not_loaded_reaches_its_member_after_loading() -> None:
    # A loaded group's topic metadata is checked again on its next heartbeat (Kafka refreshes a
    # loaded group's subscription metadata at once): the stored hash is of t1 with 1 partition,
    # and t1 has 2 now.
    live = coordinator()
    log = live.heartbeat(ShareGroupHeartbeat("g", "m1", 0, None, ("t1",)), 0).records
    loaded = coordinator()
    loaded.topics.put(TopicInfo("t1", T1, 2))
    for record in log:
        loaded.replay(record)
    loaded.finish_loading(0, ["g"])
    grown = loaded.heartbeat(ShareGroupHeartbeat("g", "m1", 1), 0).response
    assert grown.member_epoch == 2 and grown.assignment == (TopicPartitions(T1, (0, 1)),)

def test_expiry_fences_in_deadline_order_and_drops_deadlines_of_members_gone() -> None:
    c = coordinator()
    c.heartbeat(ShareGroupHeartbeat("b", "m1", 0, None, ("t1",)), 100)
    c.heartbeat(ShareGroupHeartbeat("a", "m2", 0, None, ("t1",)), 200)
    c.heartbeat(ShareGroupHeartbeat("a", "m3", 0, None, ("t1",)), 50)
    c.replay(ShareRecord(ShareGroupMemberMetadataKey("a", "m3"), None))  # gone, its deadline not
    part = c.share_partition("b", T1, 0)
    part.acquire("m1", [(0, 4)], 0, max_records=10)
    timeout = c.config.session_timeout_ms
    results = c.expire(200 + timeout)
    assert [r.response for r in results] == [
        ShareHeartbeatResponse(E.none, member_id="m1"),
        ShareHeartbeatResponse(E.none, member_id="m2"),
    ]
    assert [k for k, _ in results[0].partition_updates] == [("b", T1, 0)]
    assert c.next_deadline_ms() is None and c.expire(10**9) == []


def test_the_configured_topic_hash_function_makes_the_groups_hash() -> None:
    for name in ("murmur3", "xxh3"):
        c = coordinator(topic_hash=name)  # type: ignore[arg-type]
        c.heartbeat(ShareGroupHeartbeat("g", "m1", 0, None, ("t1",)), 0)
        expected = group_hash({"t1": topic_hash(c.topics.get("t1"), HASH_FUNCTIONS[name])},  # type: ignore[arg-type]
                              HASH_FUNCTIONS[name])
        assert c.groups["g"].metadata_hash == expected, name


def test_a_member_id_of_36_characters_joins() -> None:
    """KafkaApis.isMemberIdValid allows at most 36 characters (a UUID's string form, what clients
    send): exactly 36 joins, 37 is an invalid request (test_share_group holds the 37)."""
    member = str(uuid.UUID(int=7))
    assert len(member) == 36
    assert beat(coordinator(), member, 0, ("t1",)).error == E.none

"""ShareGroupHeartbeat / ShareGroupDescribe in the pure core (KIP-932), with a fake clock:
joining, the simple assignor's sharing, epochs and their errors, leaving, session expiry, new
partitions reaching the members, the records' bytes and their replay."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.messages import ErrorCode
from coordinator.core.share import assignor
from coordinator.core.share.coordinator import ShareGroupCoordinator
from coordinator.core.share.messages import (
    ShareGroupConfig,
    ShareGroupDescribe,
    ShareGroupHeartbeat,
    ShareRecord,
)
from coordinator.core.share.records import decode_key, decode_value, encode_key, encode_value
from coordinator.core.topics import TopicCatalog, TopicInfo

E = ErrorCode
T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def coordinator(partitions: int = 1, **config: int) -> ShareGroupCoordinator:
    topics = TopicCatalog([TopicInfo("t1", T1, partitions), TopicInfo("t2", T2, 2)])
    return ShareGroupCoordinator(ShareGroupConfig(**config), topics)  # type: ignore[arg-type]


def join(c: ShareGroupCoordinator, member: str, topics: tuple[str, ...] = ("t1",), now: int = 0):  # type: ignore[no-untyped-def]
    return c.heartbeat(ShareGroupHeartbeat("g", member, 0, None, topics, "cid", "/1.2.3.4"), now)


def beat(c: ShareGroupCoordinator, member: str, epoch: int, now: int = 0):  # type: ignore[no-untyped-def]
    return c.heartbeat(ShareGroupHeartbeat("g", member, epoch, client_id="cid"), now)


def assigned(c: ShareGroupCoordinator, member: str) -> dict[uuid.UUID, set[int]]:
    return {t: set(ps) for t, ps in c.groups["g"].members[member].assigned.items()}


def test_every_member_shares_the_only_partition() -> None:
    c = coordinator(1)
    first = join(c, "m1").response
    assert (first.error, first.member_epoch, first.heartbeat_interval_ms) == (E.none, 1, 5000)
    assert first.assignment is not None and first.assignment[0].partitions == (0,)
    join(c, "m2")
    join(c, "m3")
    for m in ("m1", "m2", "m3"):
        beat(c, m, c.groups["g"].members[m].member_epoch)
        assert assigned(c, m) == {T1: {0}}
    assert c.groups["g"].group_epoch == 3


def test_partitions_are_spread_when_there_are_more_than_members() -> None:
    c = coordinator(6)
    for m in ("m1", "m2", "m3"):
        join(c, m)
    for m in ("m1", "m2", "m3"):
        beat(c, m, c.groups["g"].members[m].member_epoch)
    held = [assigned(c, m)[T1] for m in ("m1", "m2", "m3")]
    assert [len(h) for h in held] == [2, 2, 2] and set().union(*held) == set(range(6))


def test_assignment_is_sent_on_join_full_request_or_change_only() -> None:
    c = coordinator(1)
    join(c, "m1")
    assert beat(c, "m1", 1).response.assignment is None
    full = c.heartbeat(ShareGroupHeartbeat("g", "m1", 1, None, ("t1",)), 0).response
    assert full.assignment is not None


def test_request_errors_are_invalid_request() -> None:
    c = coordinator()
    for req, message in [
        (ShareGroupHeartbeat("g", "", 0, None, ("t1",)), None),  # KafkaApis: no message
        (ShareGroupHeartbeat("g", "m" * 37, 0, None, ("t1",)), None),
        (ShareGroupHeartbeat("", "m", 0, None, ("t1",)), "GroupId can't be empty."),
        (ShareGroupHeartbeat("g", "m", 0, "", ("t1",)), "RackId can't be empty."),
        (
            ShareGroupHeartbeat("g", "m", 0, None, ()),
            "SubscribedTopicNames must be set in first request.",
        ),
        (ShareGroupHeartbeat("g", "m", -2), "MemberEpoch is invalid."),
    ]:
        r = c.heartbeat(req, 0)
        assert (r.response.error, r.response.error_message, r.records) == (
            E.invalid_request,
            message,
            (),
        )


def test_unknown_group_member_and_fenced_epochs() -> None:
    c = coordinator()
    assert beat(c, "m1", 1).response.error == E.group_id_not_found
    join(c, "m1")
    assert beat(c, "m2", 1).response.error == E.unknown_member_id
    assert beat(c, "m1", 5).response.error == E.fenced_member_epoch
    join(c, "m2")  # group epoch 2; m1 still at 1
    assert beat(c, "m1", 1).response.member_epoch == 2
    assert beat(c, "m1", 1).response.error == E.none  # the previous epoch is accepted
    assert beat(c, "m1", 0 + 3).response.error == E.fenced_member_epoch


def test_group_max_size() -> None:
    c = coordinator(max_size=1)
    join(c, "m1")
    assert join(c, "m2").response.error == E.group_max_size_reached
    assert beat(c, "m1", 1).response.error == E.none


def test_leave_and_session_expiry_remove_members_and_bump_the_epoch() -> None:
    c = coordinator()
    join(c, "m1", now=0)
    join(c, "m2", now=10_000)
    left = beat(c, "m1", -1)
    assert (left.response.error, left.response.member_epoch) == (E.none, -1)
    assert "m1" not in c.groups["g"].members and c.groups["g"].group_epoch == 3
    assert beat(c, "m1", -1).response.error == E.unknown_member_id
    assert c.next_deadline_ms() == 55_000
    assert c.expire(54_999) == []
    assert len(c.expire(55_000)) == 1
    g = c.groups["g"]
    assert (g.members, g.state.value, g.group_epoch, g.assignment_epoch) == ({}, "Empty", 4, 4)


def test_leaving_releases_the_members_records_in_its_share_partitions() -> None:
    c = coordinator()
    join(c, "m1")
    part = c.share_partition("g", T1, 0)
    part.acquire("m1", [(0, 4)], 0, max_records=10)
    updates = beat(c, "m1", -1).partition_updates
    assert [k for k, _ in updates] == [("g", T1, 0)] and part.next_fetch_offset() == 0


def test_new_partitions_reach_the_members() -> None:
    c = coordinator(1)
    join(c, "m1")
    c.topics.put(TopicInfo("t1", T1, 3))
    c.topic_changed("t1")
    r = beat(c, "m1", 1).response
    assert (
        r.member_epoch == 2 and r.assignment is not None and r.assignment[0].partitions == (0, 1, 2)
    )


def test_describe() -> None:
    c = coordinator()
    join(c, "m1", ("t1", "t2"))
    out = c.describe(ShareGroupDescribe(("g", "nope", "classic")), other_type=["classic"]).groups
    assert (out[0].group_state, out[0].group_epoch, out[0].assignor_name) == ("Stable", 1, "simple")
    member = out[0].members[0]
    assert (member.member_id, member.client_id, member.client_host) == ("m1", "cid", "/1.2.3.4")
    assert [(n, ps) for _, n, ps in member.assignment] == [("t1", (0,)), ("t2", (0, 1))]
    assert (out[1].error, out[1].error_message) == (E.group_id_not_found, "Group nope not found.")
    assert out[2].error_message == "Group classic is not a share group."


def test_records_round_trip_their_bytes_and_replay_rebuilds_the_groups() -> None:
    c = coordinator(3)
    log: list[ShareRecord] = []
    for m, now in (("m1", 0), ("m2", 1)):
        log += join(c, m, ("t1", "t2"), now).records
    log += beat(c, "m1", 1).records + beat(c, "m2", -1).records
    rebuilt = coordinator(3)
    for record in log:
        key_bytes = encode_key(record.key)
        key = decode_key(int.from_bytes(key_bytes[:2], "big"), key_bytes)
        value = None if record.value is None else decode_value(key, encode_value(record.value))
        assert (key, value) == (record.key, record.value)
        rebuilt.replay(ShareRecord(key, value))
    (g, r) = (c.groups["g"], rebuilt.groups["g"])
    assert (r.group_epoch, r.metadata_hash, r.assignment_epoch, r.members, dict(r.targets)) == (
        g.group_epoch, g.metadata_hash, g.assignment_epoch, g.members, dict(g.targets),
    )  # fmt: skip


@given(members=st.integers(1, 8), partitions=st.integers(1, 8))
def test_simple_assignor_shares_each_partition_evenly(members: int, partitions: int) -> None:
    subs = {f"m{i}": frozenset({T1}) for i in range(members)}
    out = assignor.assign(subs, {T1: partitions}, {})
    sharing = -(-members // partitions)
    holders = {p: sum(p in out[m].get(T1, ()) for m in subs) for p in range(partitions)}
    assert all(n == sharing for n in holders.values())
    counts = [len(out[m].get(T1, ())) for m in subs]
    assert max(counts) - min(counts) <= 1
    again = assignor.assign(subs, {T1: partitions}, out)
    assert again == out  # sticky: a stable group keeps its assignment


def test_offset_apis_refuse_a_share_groups_id_and_create_no_classic_group() -> None:
    """ShareGroup.validateOffsetCommit/Delete (Kafka 4.4): GROUP_ID_NOT_FOUND, so the id never
    becomes a classic group too; OffsetFetch finds no offsets."""
    from coordinator.core.coordinator import GroupCoordinator
    from coordinator.core.effects import CoordinatorConfig
    from coordinator.core.messages import (
        CommitPartition,
        CommitTopic,
        FetchGroup,
        FetchTopic,
        OffsetCommit,
        OffsetDelete,
        OffsetFetch,
    )

    core = GroupCoordinator(
        CoordinatorConfig(), TopicCatalog([TopicInfo("t1", T1, 1)]), lambda p: f"{p}-x"
    )
    joined = core.handle(1, ShareGroupHeartbeat("g", "m", 0, None, ("t1",)), 0)
    assert joined.replies[0][1].error == E.none and len(joined.records) >= 4  # type: ignore[union-attr]
    part = (CommitTopic("t1", (CommitPartition(0, 5, -1, None),)),)
    commit = core.handle(2, OffsetCommit("g", -1, "", None, -1, part, 9), 0)
    assert commit.replies[0][1].topics[0].partitions[0].error == E.group_id_not_found  # type: ignore[union-attr]
    assert commit.records == [] and core.group("g") is None
    fetch = core.handle(3, OffsetFetch((FetchGroup("g", None),), False, 9), 0)
    # Kafka 4.4 answers OffsetFetch on a share group as on a group with no offsets (checked on
    # a broker by tests/share/test_share_admin.py), not GROUP_ID_NOT_FOUND.
    fetched = fetch.replies[0][1].groups[0]  # type: ignore[union-attr]
    assert (fetched.error, fetched.topics) == (E.none, ())
    delete = core.handle(4, OffsetDelete("g", (FetchTopic("t1", (0,)),)), 0)
    assert delete.replies[0][1].error == E.group_id_not_found  # type: ignore[union-attr]

"""Classic members of a KIP-848 consumer group (coordinator.core.consumer.classic), pinned where
`make mutation` found them loose: SyncGroup's checks in Kafka's order and what a good one
answers and rearms, and LeaveGroup by instance id (who is named in the answer, who is fenced).
The flows themselves are in test_consumer_migration.py, whose helpers these reuse."""

from __future__ import annotations

import struct
import uuid

import pytest

from coordinator.core.consumer.classic import assignment_bytes, partition_map, supports_protocols
from coordinator.core.events import LeaveReason, MemberLeft
from coordinator.core.messages import (
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeavingMember,
    SyncGroup,
    SyncGroupResult,
)
from coordinator.core.topics import TopicCatalog, TopicInfo
from protocol import consumer as consumer_protocol
from tests.core.test_consumer_migration import (
    REBALANCE_MS,
    SESSION_MS,
    Classic,
    E,
    consumer_heartbeat,
    consumer_join,
    core,
    reply,
)


def classic_in_consumer_group(static: bool = False) -> tuple[object, Classic]:
    c = core()
    consumer_join(c, "n1", 0)
    member = Classic(c, "cl", static=static)
    member.rejoin(0)
    return c, member


def sync(c: object, m: Classic, now: int, *, generation: int | None = None,
         member_id: str | None = None, instance: str | None = "same",
         protocol_type: str | None = "consumer",
         protocol_name: str | None = "range") -> SyncGroupResult:  # fmt: skip
    cmd = SyncGroup("g", m.generation if generation is None else generation,
                    m.member_id if member_id is None else member_id,
                    m.instance_id if instance == "same" else instance, protocol_type,
                    protocol_name, (), 5)  # fmt: skip
    result = reply(c.handle(1, cmd, now))  # type: ignore[attr-defined]
    assert isinstance(result, SyncGroupResult)
    return result


def test_sync_checks_member_generation_and_protocol_in_kafkas_order() -> None:
    c, m = classic_in_consumer_group(static=True)
    assert sync(c, m, 1, member_id="stranger", instance=None).error is E.unknown_member_id
    assert sync(c, m, 1, member_id="stranger").error is E.fenced_instance_id
    assert sync(c, m, 1, generation=m.generation + 1).error is E.illegal_generation
    assert sync(c, m, 1, protocol_type="connect").error is E.inconsistent_group_protocol
    assert sync(c, m, 1, protocol_name="roundrobin").error is E.inconsistent_group_protocol
    ok = sync(c, m, 1)
    assert (ok.error, ok.protocol_type, ok.protocol_name) == (E.none, "consumer", "range")
    bare = sync(c, m, 1, protocol_type=None, protocol_name=None)  # v0-v4 send neither
    assert (bare.error, bare.protocol_type, bare.protocol_name) == (E.none, None, None)
    assert bare.assignment == ok.assignment
    m.generation += 1  # a heartbeat checks the generation as SyncGroup does
    assert m.heartbeat(2) is E.illegal_generation
    m.generation -= 1
    assert m.heartbeat(2) is E.none


def keep_n1(c: object, now: int) -> None:
    """n1, the consumer-protocol member, heartbeats: the group stays a consumer group."""
    n1 = c.consumer.groups["g"].members["n1"]  # type: ignore[attr-defined]
    consumer_heartbeat(c, "n1", n1.member_epoch, frozenset(), now)  # type: ignore[arg-type]


def test_a_good_sync_rearms_the_session_and_ends_the_sync_deadline() -> None:
    c, m = classic_in_consumer_group()
    assert sync(c, m, 5_000).error is E.none
    group = c.consumer.groups["g"]  # type: ignore[attr-defined]
    # the join's session deadline (SESSION_MS) has passed: the sync's holds the member
    keep_n1(c, 5_000 + SESSION_MS - 1)
    c.expire(5_000 + SESSION_MS - 1)  # type: ignore[attr-defined]
    assert m.member_id in group.members
    # heartbeats keep it past the rebalance timeout: no sync deadline is left to fence it
    now = 5_000
    while now < REBALANCE_MS + 5_000:
        now += SESSION_MS // 2
        keep_n1(c, now)
        assert m.heartbeat(now) in (E.none, E.rebalance_in_progress)
        c.expire(now)  # type: ignore[attr-defined]
        assert m.member_id in group.members, now
    keep_n1(c, now + SESSION_MS + 1)
    c.expire(now + SESSION_MS + 1)  # type: ignore[attr-defined]
    assert m.member_id not in group.members


def test_a_sync_behind_the_group_epoch_must_rejoin_within_its_rebalance_timeout() -> None:
    c, m = classic_in_consumer_group()
    assert sync(c, m, 10).error is E.none
    consumer_join(c, "n2", 20)  # the group epoch moves on
    group = c.consumer.groups["g"]  # type: ignore[attr-defined]
    assert group.group_epoch > group.members[m.member_id].member_epoch
    assert sync(c, m, 30).error is E.rebalance_in_progress
    for now in range(2_000, 30 + REBALANCE_MS, 2_000):  # both stay alive meanwhile
        keep_n1(c, now)
        m.heartbeat(now)
        consumer_heartbeat(c, "n2", group.members["n2"].member_epoch, frozenset(), now)
        c.expire(now)  # type: ignore[attr-defined]
    c.expire(30 + REBALANCE_MS - 1)  # type: ignore[attr-defined]
    assert m.member_id in group.members
    c.expire(30 + REBALANCE_MS + 1)  # type: ignore[attr-defined]
    assert m.member_id not in group.members  # never rejoined: fenced


def leave(c: object, *members: tuple[str, str | None]) -> tuple[LeaveGroupResult, list[object]]:
    fx = c.handle(1, LeaveGroup("g", tuple(LeavingMember(mid, i) for mid, i in members), 3),
                  100)  # type: ignore[attr-defined]  # fmt: skip
    result = reply(fx)
    assert isinstance(result, LeaveGroupResult)
    return result, list(fx.events)


def test_leave_by_instance_id_names_the_member_and_fences_a_wrong_one() -> None:
    c, m = classic_in_consumer_group(static=True)
    result, events = leave(c, ("wrong-id", "cl"))
    assert result.error is E.none
    assert [(r.member_id, r.group_instance_id, r.error) for r in result.members] == [
        ("wrong-id", "cl", E.fenced_instance_id)]
    assert events == [] and m.member_id in c.consumer.groups["g"].members  # type: ignore[attr-defined]
    result, events = leave(c, ("", "cl"), ("", "nobody"))
    assert [(r.member_id, r.group_instance_id, r.error) for r in result.members] == [
        (m.member_id, "cl", E.none), ("", "nobody", E.unknown_member_id)]
    removed = [e for e in events if isinstance(e, MemberLeft)]
    assert [(e.member_id, e.reason) for e in removed] == [(m.member_id, LeaveReason.LEFT)]
    assert m.member_id not in c.consumer.groups["g"].members  # type: ignore[attr-defined]


def test_a_static_classic_member_restarted_under_a_new_id_replaces_the_old_one() -> None:
    c, m = classic_in_consumer_group(static=True)
    assert sync(c, m, 1).error is E.none
    group = c.consumer.groups["g"]  # type: ignore[attr-defined]
    old_id, target = m.member_id, group.target_assignment[m.member_id]
    restarted = Classic(c, "cl", static=True)  # same instance id, no member id yet
    fx = c.handle(1, restarted.join_cmd(), 50)  # type: ignore[attr-defined]
    result = reply(fx)
    assert isinstance(result, JoinGroupResult) and result.error is E.none
    new_id = result.member_id
    assert new_id != old_id and old_id not in group.members and new_id in group.members
    assert group.target_assignment.get(new_id) == target and old_id not in group.target_assignment
    keys = [(type(r.key).__name__, getattr(r.key, "member_id", None), r.value is None)
            for r in fx.records]  # fmt: skip
    assert keys[:3] == [("ConsumerGroupCurrentMemberAssignmentKey", old_id, True),
                        ("ConsumerGroupTargetAssignmentMemberKey", old_id, True),
                        ("ConsumerGroupMemberMetadataKey", old_id, True)]  # fmt: skip
    assert ("ConsumerGroupMemberMetadataKey", new_id, False) in keys
    assert ("ConsumerGroupTargetAssignmentMemberKey", new_id, False) in keys
    left = [e for e in fx.events if isinstance(e, MemberLeft)]
    assert [(e.member_id, e.group_instance_id, e.reason, e.client_id) for e in left] == [
        (old_id, "cl", LeaveReason.FENCED, "cl")]
    # the old id's timers are gone with it: nothing fences the new member at the old deadlines
    for now in range(2_000, 3 * SESSION_MS, 2_000):
        keep_n1(c, now)
        restarted.member_id, restarted.generation = new_id, result.generation_id
        restarted.heartbeat(now)
        c.expire(now)  # type: ignore[attr-defined]
    assert new_id in group.members


def test_a_static_classic_join_with_a_member_id_must_match_its_instance() -> None:
    c, m = classic_in_consumer_group(static=True)
    base = m.join_cmd()

    def join(member_id: str, instance: str) -> JoinGroupResult:
        cmd = JoinGroup("g", base.session_timeout_ms, base.rebalance_timeout_ms, member_id,
                        instance, "consumer", base.protocols, None, "cl", "/h", 5)  # fmt: skip
        result = reply(c.handle(1, cmd, 10))  # type: ignore[attr-defined]
        assert isinstance(result, JoinGroupResult)
        return result

    assert join("someone-else", "cl").error is E.fenced_instance_id
    assert join(m.member_id, "ghost").error is E.unknown_member_id
    again = join(m.member_id, "cl")
    assert again.error is E.none and again.member_id == m.member_id
    group = c.consumer.groups["g"]  # type: ignore[attr-defined]
    assert group.members[m.member_id].instance_id == "cl"


def test_a_classic_member_waits_for_unreleased_partitions_then_rejoins_to_take_them() -> None:
    c = core()
    response, _ = consumer_join(c, "n1", 0)  # n1 owns all four partitions
    owned = frozenset(p for tp in (response.assignment or ()) for p in tp.partitions)
    assert owned == {0, 1, 2, 3}
    m = Classic(c, "cl")
    m.rejoin(10)
    group = c.consumer.groups["g"]  # type: ignore[attr-defined]
    n1_epoch = group.members["n1"].member_epoch
    # n1 has not revoked yet: the classic member's target is held elsewhere
    for now in (20, 30):
        member = group.members[m.member_id]
        if member.member_epoch != m.generation:
            m.rejoin(now)
        assert sync(c, m, now).error in (E.none, E.rebalance_in_progress)
    member = group.members[m.member_id]
    assert member.state.name == "UNRELEASED_PARTITIONS", member.state
    assert m.heartbeat(40) is E.none  # still waiting: nothing to rejoin for
    # n1 revokes what the classic member is to get: it must rejoin to take it
    target = group.target_assignment["n1"]
    keep = frozenset(p for ps in target.values() for p in ps)
    consumer_heartbeat(c, "n1", n1_epoch, keep, 50)
    consumer_heartbeat(c, "n1", group.members["n1"].member_epoch, keep, 55)
    assert m.heartbeat(60) is E.rebalance_in_progress


@pytest.mark.parametrize(("metadata", "version"), [
    (b"", 0), (b"\x00", 0), (b"\x00\x01", 1), (b"\x00\x02rest", 2), (b"\x00\x03", 3),
    (b"\x00\x07", 3),  # a newer subscription: the highest version we write
    (b"\xff\xff", 0),  # -1 (signed, as Kafka reads an int16): the lowest
    (b"\x01\x00", 3),  # 256
])
def test_a_classic_members_assignment_is_written_at_its_subscriptions_version(
    metadata: bytes, version: int
) -> None:
    catalog = TopicCatalog([TopicInfo("orders", uuid.UUID(int=7), 4)])
    partitions = {uuid.UUID(int=7): frozenset({2, 0}), uuid.UUID(int=9): frozenset({1})}
    written = assignment_bytes(catalog, partitions, metadata)  # the unknown topic id is left out
    assert written == consumer_protocol.encode_assignment({"orders": (0, 2)}, version)
    assert written[:2] == struct.pack(">h", version)


def test_classic_protocols_need_the_consumer_type_and_at_least_one_name() -> None:
    from coordinator.core.consumer.model import ConsumerGroup

    empty = ConsumerGroup("g")  # no classic member yet: any name would do
    assert supports_protocols(empty, "consumer", ["range"])
    assert not supports_protocols(empty, "connect", ["range"])
    assert not supports_protocols(empty, "consumer", [])


def test_partitions_by_name_drop_unknown_topics_and_empty_lists() -> None:
    catalog = TopicCatalog([TopicInfo("orders", uuid.UUID(int=7), 4)])
    assert partition_map(catalog, {"orders": [1, 0], "gone": [2], "empty": []}) == {
        uuid.UUID(int=7): frozenset({0, 1})}
    assert partition_map(catalog, {"gone": [1]}) == {}
    assert partition_map(catalog, {"orders": []}) == {}

"""The online upgrade's checks and the records of the members it converts, and the downgrade's
converted members, pinned where `make mutation` found them loose (issue 36:
`handlers/migration.upgrade` and `maybe_downgrade`): the size limits at their boundary,
assignments that overlap across any two members, the subscription read from the protocol the
group chose (or each member's first one before any was chosen), the rack id, the epochs and
the group id of every record; downgraded static members keep their instance ids, and each
member's assignment is its target (empty when it has none yet) at its subscription's version.
The flows are in test_consumer_migration.py, whose helpers these reuse.
"""

from __future__ import annotations

import dataclasses
import struct

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat, HeartbeatResponse
from coordinator.core.consumer.model import MemberState
from coordinator.core.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupMemberMetadataKey,
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    TopicPartitions,
)
from coordinator.core.coordinator import Effects, GroupCoordinator
from coordinator.core.events import MemberJoined
from coordinator.core.group import GroupState
from coordinator.core.messages import ErrorCode, JoinGroup, JoinGroupResult, Protocol
from coordinator.core.records import GroupMetadataKey
from tests.core.test_consumer_migration import (
    REBALANCE_MS,
    SESSION_MS,
    TID,
    Classic,
    T,
    assignment,
    classic_group,
    consumer_join,
    core,
)

E = ErrorCode
MALFORMED = "Cannot upgrade classic group g to consumer group because the embedded consumer " \
    "protocol is malformed."  # fmt: skip


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def subscription_v3(topic: str, rack: str) -> bytes:
    """ConsumerProtocolSubscription v3: [topic], no user data, nothing owned, generation -1,
    the rack id."""
    return struct.pack(">hi", 3, 1) + _s(topic) + struct.pack(">iii", -1, 0, -1) + _s(rack)


def join(c: GroupCoordinator, reply_to: int, name: str, protocols: tuple[Protocol, ...]) -> None:
    """A v3 JoinGroup (no MEMBER_ID_REQUIRED round): parked in the join phase."""
    cmd = JoinGroup("g", SESSION_MS, REBALANCE_MS, "", None, "consumer", protocols, None, name,
                    "/h", 3)  # fmt: skip
    assert not c.handle(reply_to, cmd, 0).replies


def upgrade(c: GroupCoordinator, now: int = 5) -> tuple[HeartbeatResponse, Effects]:
    cmd = ConsumerGroupHeartbeat("g", "n1", 0, rebalance_timeout_ms=REBALANCE_MS,
                                 subscribed_topic_names=(T,), topic_partitions=())  # fmt: skip
    fx = c.handle(99, cmd, now)
    response = dict(fx.replies)[99]
    assert isinstance(response, HeartbeatResponse)
    return response, fx


def written(fx: Effects, key_type: type) -> list[object]:
    return [r for r in fx.records if isinstance(r.key, key_type)]


def test_an_upgrade_before_any_protocol_was_chosen_reads_each_member_s_first_one() -> None:
    c = core()
    join(c, 10, "c0", (Protocol("range", subscription_v3(T, "r0")),))
    join(c, 11, "c1", (Protocol("range", subscription_v3(T, "r1")),
                       Protocol("roundrobin", subscription_v3("other", "r9"))))  # fmt: skip
    group = c.state.groups["g"]
    assert (group.state, group.protocol_name) == (GroupState.PREPARING_REBALANCE, None)
    ids = list(group.members)
    response, fx = upgrade(c)
    assert response.error is E.none
    subs = {r.key.member_id: r.value for r in written(fx, ConsumerGroupMemberMetadataKey)}  # type: ignore[attr-defined]
    assert [(subs[m].subscribed_topic_names, subs[m].rack_id) for m in ids] == [
        ((T,), "r0"), ((T,), "r1")]  # fmt: skip
    sessions = {m: subs[m].classic_member_metadata.session_timeout_ms for m in ids}
    assert sessions == dict.fromkeys(ids, SESSION_MS)
    # The parked joins go back to their members, who rejoin the consumer group.
    replies = dict(fx.replies)
    assert [replies[10], replies[11]] == [
        JoinGroupResult(E.rebalance_in_progress, member_id=m) for m in ids]  # fmt: skip


def test_an_upgrade_reads_the_subscription_of_the_protocol_the_group_chose() -> None:
    c = core()
    join(c, 10, "c0", (Protocol("roundrobin", subscription_v3("other", "r9")),
                       Protocol("range", subscription_v3(T, "r0"))))  # fmt: skip
    join(c, 11, "c1", (Protocol("range", subscription_v3(T, "r1")),))
    c.expire(0)  # the join phase ends: "range", the one protocol both list
    group = c.state.groups["g"]
    assert (group.state, group.protocol_name) == (GroupState.COMPLETING_REBALANCE, "range")
    ids = list(group.members)
    response, fx = upgrade(c)
    assert response.error is E.none
    subs = {r.key.member_id: r.value for r in written(fx, ConsumerGroupMemberMetadataKey)}  # type: ignore[attr-defined]
    assert [(subs[m].subscribed_topic_names, subs[m].rack_id) for m in ids] == [
        ((T,), "r0"), ((T,), "r1")]  # fmt: skip


def test_the_records_of_an_upgrade_name_the_group_and_the_generation() -> None:
    c = core()
    clients = classic_group(c, 2)
    generation = c.state.groups["g"].generation_id
    _, fx = upgrade(c)
    ids = [cl.member_id for cl in clients]
    upgraded = fx.records[1 : 1 + 2 + 1 + 2 + 1 + 2]  # after the classic group's tombstone
    assert [r.key for r in upgraded] == [
        *(ConsumerGroupMemberMetadataKey("g", m) for m in ids),
        ConsumerGroupMetadataKey("g"),
        *(ConsumerGroupTargetAssignmentMemberKey("g", m) for m in ids),
        ConsumerGroupTargetAssignmentMetadataKey("g"),
        *(ConsumerGroupCurrentMemberAssignmentKey("g", m) for m in ids),
    ]
    currents = [r.value for r in upgraded[-2:]]
    assert [(v.member_epoch, v.previous_member_epoch, v.state) for v in currents] == [  # type: ignore[union-attr]
        (generation, generation, int(MemberState.STABLE))] * 2  # fmt: skip
    assert [v.assigned_partitions for v in currents] == [  # type: ignore[union-attr]
        (TopicPartitions(TID, (0, 1)),), (TopicPartitions(TID, (2,)),)]  # fmt: skip


def test_assignments_that_overlap_between_any_two_members_refuse_the_upgrade() -> None:
    c = core()
    classic_group(c, 3, split={0: (0, 1), 1: (2,), 2: (1,)})  # c0 and c2 both hold partition 1
    response, fx = upgrade(c)
    assert (response.error, response.error_message) == (E.group_id_not_found, MALFORMED)
    assert not fx.records and c.state.groups["g"].state is GroupState.STABLE
    c = core()
    classic_group(c, 3, split={0: (0, 1), 1: (2,), 2: (3,)})
    assert upgrade(c)[0].error is E.none


def test_the_consumer_group_size_limit_refuses_only_a_larger_group() -> None:
    def attempt(limit: int) -> HeartbeatResponse:
        c = core()
        consumer = c.state.consumer
        consumer.config = dataclasses.replace(consumer.config, max_size=limit)
        classic_group(c, 3)
        return upgrade(c)[0]

    # As large as the limit: upgraded, and then the joining member finds the group full.
    assert attempt(3).error is E.group_max_size_reached
    refused = attempt(2)
    assert (refused.error, refused.error_message) == (
        E.group_id_not_found,
        "Cannot upgrade classic group g to consumer group because the group size exceeds the "
        "consumer group maximum size.",
    )


def test_a_downgrade_at_the_classic_group_size_limit_happens() -> None:
    def downgraded(limit: int) -> bool:
        c = core(max_group_size=limit)  # group.max.size: the classic groups' limit
        classic_group(c, 2)
        consumer_join(c, "n1", 5)
        c.handle(1, ConsumerGroupHeartbeat("g", "n1", -1), 7)  # two classic members remain
        return "g" in c.state.groups

    assert downgraded(2)  # as many members as the limit: downgraded


def test_downgraded_members_keep_instance_ids_and_targets_at_their_subscription_version() -> None:
    c = core()
    clients = classic_group(c, 2, static=True)
    consumer_join(c, "n1", 5)
    target = dict(c.consumer.groups["g"].target_assignment)
    fx = c.handle(1, ConsumerGroupHeartbeat("g", "n1", -1), 7)
    joined = [e for e in fx.events if isinstance(e, MemberJoined)]
    assert [(e.member_id, e.group_instance_id) for e in joined] == [
        (cl.member_id, cl.name) for cl in clients]  # fmt: skip
    (record,) = written(fx, GroupMetadataKey)
    got = {m.member_id: m.assignment for m in record.value.members}  # type: ignore[attr-defined]
    # Each member's target as the classic group's assignment, at v1 (their subscriptions' version).
    assert got == {cl.member_id: assignment(*sorted(target[cl.member_id].get(TID, ())))
                   for cl in clients}  # fmt: skip


def test_a_downgraded_member_without_a_target_yet_gets_an_empty_assignment() -> None:
    c = core(consumer_assignment_interval_ms=60_000)  # targets wait for the next assignment
    consumer_join(c, "n1", 0)
    late = Classic(c, "late")
    late.rejoin(1)  # a classic member joins the consumer group: no target yet
    assert late.member_id not in c.consumer.groups["g"].target_assignment
    fx = c.handle(1, ConsumerGroupHeartbeat("g", "n1", -1), 2)
    (record,) = written(fx, GroupMetadataKey)
    members = record.value.members  # type: ignore[attr-defined]
    assert [(m.member_id, m.assignment) for m in members] == [(late.member_id, assignment())]


def test_a_group_downgraded_without_a_rebalance_keeps_the_downgrade_s_state_time() -> None:
    c = core()
    clients = classic_group(c, 3, static=True)
    cmd = ConsumerGroupHeartbeat("g", "n0", 0, instance_id="c0", rebalance_timeout_ms=REBALANCE_MS,
                                 subscribed_topic_names=(T,), topic_partitions=())  # fmt: skip
    assert upgrade_response(c.handle(1, cmd, 0)).error is E.none
    Classic(c, "c0", static=True).rejoin(100)  # replaces n0: downgraded at once, Stable
    assert c.state.groups["g"].state is GroupState.STABLE
    # Another static member restarts: a new id, no rebalance, the group written again.
    fx = c.handle(2, Classic(c, "c1", static=True).join_cmd(), 500)
    (record,) = written(fx, GroupMetadataKey)
    assert record.value.current_state_timestamp_ms == c.state.wall(100)  # type: ignore[attr-defined]
    assert clients[1].member_id not in c.state.groups["g"].members


def upgrade_response(fx: Effects) -> HeartbeatResponse:
    ((_, response),) = fx.replies
    assert isinstance(response, HeartbeatResponse)
    return response

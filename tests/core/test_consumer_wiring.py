"""The KIP-848 groups inside the core (coordinator.core.handlers.consumer and the classic APIs
that meet them): one namespace of group ids, offsets checked against member epochs, ListGroups'
types, DeleteGroups, JoinGroup on a consumer group, timers, and replay of the log."""

from __future__ import annotations

import itertools
import uuid

from coordinator.core.consumer.messages import (
    ConsumerGroupDescribe,
    ConsumerGroupDescribeResult,
    ConsumerGroupHeartbeat,
    HeartbeatResponse,
)
from coordinator.core.consumer.records import TopicPartitions
from coordinator.core.coordinator import CoordinatorConfig, Effects, GroupCoordinator
from coordinator.core.messages import (
    CommitPartition,
    CommitTopic,
    DeleteGroups,
    DeleteGroupsResult,
    ErrorCode,
    FetchGroup,
    FetchTopic,
    JoinGroup,
    JoinGroupResult,
    ListGroups,
    ListGroupsResult,
    OffsetCommit,
    OffsetCommitResult,
    OffsetDelete,
    OffsetDeleteResult,
    OffsetFetch,
    OffsetFetchResult,
    Protocol,
)
from coordinator.core.records import Record
from coordinator.core.topics import TopicCatalog, TopicInfo

E = ErrorCode
T = "orders"


def core() -> GroupCoordinator:
    ids = itertools.count()
    return GroupCoordinator(
        CoordinatorConfig(consumer_session_timeout_ms=10_000, consumer_heartbeat_interval_ms=500),
        TopicCatalog([TopicInfo(T, uuid.UUID(int=7), 4)]),
        lambda prefix: f"{prefix}-{next(ids)}",
    )


def reply(fx: Effects) -> object:
    ((_, result),) = fx.replies
    return result


def join(c: GroupCoordinator, gid: str, mid: str, now: int = 0) -> HeartbeatResponse:
    fx = c.handle(
        1,
        ConsumerGroupHeartbeat(
            gid,
            mid,
            0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=(T,),
            topic_partitions=(),
        ),
        now,
    )
    result = reply(fx)
    assert isinstance(result, HeartbeatResponse)
    return result


def one(partition: int, offset: int) -> tuple[CommitTopic, ...]:
    return (CommitTopic(T, (CommitPartition(partition, offset, -1, ""),)),)


def admin_commit(c: GroupCoordinator, gid: str, partition: int, offset: int) -> Effects:
    return c.handle(1, OffsetCommit(gid, -1, "", None, -1, one(partition, offset), 9), 0)


def commit(c: GroupCoordinator, gid: str, mid: str, epoch: int, version: int = 9) -> ErrorCode:
    cmd = OffsetCommit(gid, epoch, mid, None, -1, one(0, 5), version)
    result = reply(c.handle(1, cmd, 0))
    assert isinstance(result, OffsetCommitResult)
    return result.topics[0].partitions[0].error


def test_a_heartbeat_creates_a_group_whose_records_are_core_records() -> None:
    c = core()
    fx = c.handle(
        1,
        ConsumerGroupHeartbeat(
            "g",
            "m1",
            0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=(T,),
            topic_partitions=(),
        ),
        0,
    )
    response = reply(fx)
    assert isinstance(response, HeartbeatResponse) and response.error is E.none
    assert response.member_epoch == 2 and response.heartbeat_interval_ms == 500
    assert fx.records and all(type(r) is Record for r in fx.records)
    assert "g" in c.consumer.groups and "g" not in c.state.groups
    assert c.next_deadline_ms() == 10_000  # the consumer session timer drives the runtime's


def test_offsets_of_a_consumer_group_are_checked_against_the_member_epoch() -> None:
    c = core()
    epoch = join(c, "g", "m1").member_epoch
    assert commit(c, "g", "m1", epoch) is E.none
    assert commit(c, "g", "m1", epoch + 1) is E.stale_member_epoch
    assert commit(c, "g", "nobody", epoch) is E.unknown_member_id
    assert commit(c, "g", "m1", epoch, version=8) is E.unsupported_version
    assert commit(c, "g", "", -1) is E.unknown_member_id  # not Empty: an admin commit is refused
    assert "g" not in c.state.groups  # no simple group was made for it

    def fetch(member_id: str | None, member_epoch: int) -> OffsetFetchResult:
        group = FetchGroup("g", (FetchTopic(T, (0,)),), member_id, member_epoch)
        result = reply(c.handle(1, OffsetFetch((group,), False, 9), 0))
        assert isinstance(result, OffsetFetchResult)
        return result

    assert fetch("m1", epoch).groups[0].topics[0].partitions[0].offset == 5
    assert fetch("m1", epoch - 1).groups[0].error is E.stale_member_epoch
    assert fetch("m2", epoch).groups[0].error is E.unknown_member_id
    assert fetch(None, -1).groups[0].topics[0].partitions[0].offset == 5  # admin


def test_list_groups_by_type_and_state_and_describe() -> None:
    c = core()
    join(c, "cg", "m1")
    admin_commit(c, "simple", 0, 1)

    def listed(states: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        result = reply(c.handle(1, ListGroups(states, types), 0))
        assert isinstance(result, ListGroupsResult)
        return sorted((g.group_id, g.group_type, g.protocol_type, g.state) for g in result.groups)

    assert listed() == [
        ("cg", "consumer", "consumer", "Stable"),
        ("simple", "classic", "", "Empty"),
    ]
    assert listed(types=("Consumer",)) == [("cg", "consumer", "consumer", "Stable")]
    assert listed(types=("classic",)) == [("simple", "classic", "", "Empty")]
    assert listed(states=("stable",)) == [("cg", "consumer", "consumer", "Stable")]
    described = reply(c.handle(1, ConsumerGroupDescribe(("cg", "simple", "none")), 0))
    assert isinstance(described, ConsumerGroupDescribeResult)
    cg, simple, none = described.groups
    assert cg.error is E.none and cg.description is not None
    assert cg.topic_names == ((uuid.UUID(int=7), T),)
    assert (simple.error, simple.error_message) == (
        E.group_id_not_found,
        "Group simple is not a consumer group.",
    )
    assert none.error is E.group_id_not_found


def test_an_empty_classic_group_gives_way_and_a_busy_one_refuses() -> None:
    c = core()
    admin_commit(c, "g", 0, 3)
    assert "g" in c.state.groups
    assert join(c, "g", "m1").error is E.none
    assert "g" not in c.state.groups and "g" in c.consumer.groups
    assert c.committed_offsets("g")[(T, 0)].offset == 3  # the offsets stay
    # A classic group with members whose subscription does not parse refuses the online
    # upgrade (tests/core/test_consumer_migration.py has the upgrades that happen).
    jg = JoinGroup("busy", 10_000, 10_000, "", None, "consumer", (Protocol("range", b""),),
                   None, "c", "/h", 3)  # fmt: skip
    c.handle(1, jg, 0)
    c.expire(3_000)  # the initial rebalance delay: the join completes
    assert c.state.groups["busy"].members
    refused = join(c, "busy", "m1")
    assert refused.error is E.group_id_not_found


def test_join_group_on_a_consumer_group() -> None:
    c = core()
    join(c, "g", "m1")
    jg = JoinGroup("g", 10_000, 10_000, "", None, "consumer", (Protocol("range", b""),),
                   None, "c", "/h", 4)  # fmt: skip
    result = reply(c.handle(1, jg, 0))
    assert isinstance(result, JoinGroupResult)
    # A classic member of a consumer group (issue 23 item 6): KIP-394's id first, nothing kept.
    assert result.error is E.member_id_required and result.member_id
    assert set(c.consumer.groups["g"].members) == {"m1"}
    # Once empty (the member left), the id becomes a classic group.
    c.handle(1, ConsumerGroupHeartbeat("g", "m1", -1), 0)
    assert c.consumer.groups["g"].members == {}
    result = reply(c.handle(1, jg, 0))
    assert isinstance(result, JoinGroupResult) and result.error is E.member_id_required
    assert "g" not in c.consumer.groups and "g" in c.state.groups


def test_delete_groups_and_session_expiry() -> None:
    c = core()
    epoch = join(c, "g", "m1").member_epoch
    commit(c, "g", "m1", epoch)
    result = reply(c.handle(1, DeleteGroups(("g",)), 0))
    assert isinstance(result, DeleteGroupsResult)
    assert result.results[0].error is E.non_empty_group
    fx = c.expire(10_000)  # the session timeout fences the member
    assert fx.records and not c.consumer.groups["g"].members
    result = reply(c.handle(1, DeleteGroups(("g",)), 0))
    assert isinstance(result, DeleteGroupsResult) and result.results[0].error is E.none
    assert "g" not in c.consumer.groups and not c.committed_offsets("g")


def test_replaying_the_records_rebuilds_the_groups_and_offsets() -> None:
    live = core()
    records: list[Record] = list(admin_commit(live, "g", 1, 9).records)
    for mid in ("m1", "m2"):
        records += live.handle(1, ConsumerGroupHeartbeat(
            "g", mid, 0, rebalance_timeout_ms=30_000, subscribed_topic_names=(T,),
            topic_partitions=()), 0).records  # fmt: skip
    # Offsets replayed after the consumer records, and before them (a compacted log).
    for order in (records, records[1:] + records[:1]):
        loaded = core()
        for record in order:
            loaded.replay(record)
        loaded.finish_loading(0)
        assert "g" not in loaded.state.groups
        assert loaded.consumer.describe("g") == live.consumer.describe("g")
        assert loaded.committed_offsets("g") == live.committed_offsets("g")


def test_offset_delete_refuses_a_consumer_groups_subscribed_topics_per_partition() -> None:
    """Kafka's ConsumerGroup.validateOffsetDelete checks nothing; each partition of a topic the
    members subscribe to is refused with GROUP_SUBSCRIBED_TO_TOPIC, the rest deleted (it was
    GROUP_ID_NOT_FOUND: the handler knew classic groups only; found by tests/conformance)."""
    c = core()
    member = join(c, "g", "m1")
    assert commit(c, "g", "m1", member.member_epoch) is E.none
    result = reply(c.handle(1, OffsetDelete("g", (FetchTopic(T, (0, 9)),)), 0))
    assert isinstance(result, OffsetDeleteResult) and result.error is E.none
    assert [(p.partition, p.error) for p in result.topics[0].partitions] == [
        (0, E.group_subscribed_to_topic), (9, E.unknown_topic_or_partition)
    ]  # fmt: skip
    leave = ConsumerGroupHeartbeat("g", "m1", -1)
    assert isinstance(reply(c.handle(1, leave, 0)), HeartbeatResponse)
    result = reply(c.handle(1, OffsetDelete("g", (FetchTopic(T, (0,)),)), 0))
    assert isinstance(result, OffsetDeleteResult)
    assert [(p.partition, p.error) for p in result.topics[0].partitions] == [(0, E.none)]
    fetched = reply(c.handle(1, OffsetFetch((FetchGroup("g", None),), False, 9), 0))
    assert isinstance(fetched, OffsetFetchResult) and fetched.groups[0].topics == ()



def test_a_batch_applies_a_revocation_before_the_newcomer_waiting_for_it() -> None:
    """One pass of the server's loop (handle_many): the newcomer's heartbeat read before its
    holder's revocation in the same batch still gets the freed partitions; a holder that still
    reports them keeps them (revocation before assignment)."""
    c = core()
    a = join(c, "g", "a")
    assert a.assignment is not None and sum(len(tp.partitions) for tp in a.assignment) == 4
    now = 1_000  # past the assignment interval: b's join is assigned at once
    b = join(c, "g", "b", now)
    assert b.assignment == ()  # its target is still a's: UNRELEASED_PARTITIONS
    everything = a.assignment
    told = reply(c.handle(2, ConsumerGroupHeartbeat("g", "a", 2, topic_partitions=everything),
                          now))  # fmt: skip
    assert isinstance(told, HeartbeatResponse) and told.assignment is not None
    kept = told.assignment  # a is to revoke the rest
    assert sum(len(tp.partitions) for tp in kept) == 2

    def batch(owned: tuple[TopicPartitions, ...]) -> dict[int, HeartbeatResponse]:
        """b's beat read first, a's second, in one pass."""
        fx = c.handle_many(
            [
                (3, ConsumerGroupHeartbeat("g", "b", b.member_epoch, topic_partitions=())),
                (4, ConsumerGroupHeartbeat("g", "a", told.member_epoch, topic_partitions=owned)),
            ],
            now,
        )
        out = dict(fx.replies)
        assert all(isinstance(r, HeartbeatResponse) for r in out.values())
        return out  # type: ignore[return-value]

    still = batch(everything)  # a has not revoked: nothing for b
    assert still[3].assignment is None and still[4].member_epoch == 2
    done = batch(kept)  # revoked, in the same pass as b's beat, read after it
    assert done[3].assignment is not None
    assert sum(len(tp.partitions) for tp in done[3].assignment) == 2
    assert done[4].member_epoch == done[3].member_epoch == b.member_epoch

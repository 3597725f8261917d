"""The online upgrade and downgrade between classic and KIP-848 consumer groups (issue 23 item 6),
through the core with a fake clock: a classic group becomes a consumer group when a
consumer-protocol member joins it, its classic members keep working through JoinGroup, SyncGroup,
Heartbeat and LeaveGroup (their partitions move only through their rejoins: never owned twice),
and the group becomes a classic group again when its last consumer-protocol member goes."""

from __future__ import annotations

import itertools
import struct
import uuid

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat, HeartbeatResponse
from coordinator.core.consumer.records import ConsumerGroupRecord
from coordinator.core.coordinator import CoordinatorConfig, Effects, GroupCoordinator
from coordinator.core.group import GroupState
from coordinator.core.messages import (
    CommitPartition,
    CommitTopic,
    ErrorCode,
    Heartbeat,
    HeartbeatResult,
    JoinGroup,
    JoinGroupResult,
    LeaveGroup,
    LeaveGroupResult,
    LeavingMember,
    OffsetCommit,
    OffsetCommitResult,
    Protocol,
    SyncAssignment,
    SyncGroup,
    SyncGroupResult,
)
from coordinator.core.records import GroupMetadataKey, Record
from coordinator.core.topics import TopicCatalog, TopicInfo
from protocol import consumer as consumer_protocol
from tests.core.test_consumer_support import check_group, snapshot

E = ErrorCode
T = "orders"
TID = uuid.UUID(int=7)
SESSION_MS = 6_000  # the classic members' own session timeout (the consumer one is 10 s)
REBALANCE_MS = 20_000


def core(policy: str = "bidirectional", **config: int) -> GroupCoordinator:
    ids = itertools.count()
    return GroupCoordinator(
        CoordinatorConfig(
            **{
                "consumer_session_timeout_ms": 10_000,
                "consumer_heartbeat_interval_ms": 500,
                # every join assigned at once, as in Kafka 4.1
                "consumer_assignment_interval_ms": 0,
                "initial_rebalance_delay_ms": 0,
                **config,
            },
            consumer_migration_policy=policy,
        ),
        TopicCatalog([TopicInfo(T, TID, 4)]),
        lambda prefix: f"{prefix}-{next(ids)}",
    )


def _s(text: str) -> bytes:
    return struct.pack(">h", len(text)) + text.encode()


def subscription(owned: tuple[int, ...] = ()) -> bytes:
    """ConsumerProtocolSubscription v1: [T], no user data, owned partitions of T."""
    data = struct.pack(">hi", 1, 1) + _s(T) + struct.pack(">i", -1)
    if not owned:
        return data + struct.pack(">i", 0)
    return data + struct.pack(">i", 1) + _s(T) + struct.pack(f">i{len(owned)}i", len(owned), *owned)


def assignment(*partitions: int) -> bytes:
    return consumer_protocol.encode_assignment({T: partitions}, 1)


class Classic:
    """A classic consumer: eager (owns nothing while it rejoins) or cooperative (reports what it
    owns and keeps it until the coordinator's assignment leaves it out)."""

    def __init__(
        self, c: GroupCoordinator, name: str, cooperative: bool = False, static: bool = False
    ) -> None:
        self.c = c
        self.name = name
        self.instance_id = name if static else None
        self.cooperative = cooperative
        self.member_id = ""
        self.generation = -1
        self.owned: frozenset[int] = frozenset()
        self.protocol = "cooperative-sticky" if cooperative else "range"

    def join_cmd(self) -> JoinGroup:
        owned = tuple(sorted(self.owned)) if self.cooperative else ()
        if not self.cooperative:
            self.owned = frozenset()  # eager: everything revoked before rejoining
        protocols = (Protocol(self.protocol, subscription(owned)),)
        return JoinGroup("g", SESSION_MS, REBALANCE_MS, self.member_id, self.instance_id,
                         "consumer", protocols, None, self.name, "/h", 3)  # fmt: skip

    def joined(self, result: JoinGroupResult) -> None:
        assert result.error is E.none, result
        self.member_id, self.generation = result.member_id, result.generation_id

    def rejoin(self, now: int) -> JoinGroupResult:
        """JoinGroup to a consumer group: answered at once."""
        result = reply(self.c.handle(1, self.join_cmd(), now))
        assert isinstance(result, JoinGroupResult)
        self.joined(result)
        return result

    def sync(self, now: int) -> SyncGroupResult:
        cmd = SyncGroup("g", self.generation, self.member_id, self.instance_id, "consumer",
                        self.protocol, (), 5)  # fmt: skip
        result = reply(self.c.handle(1, cmd, now))
        assert isinstance(result, SyncGroupResult)
        if result.error is E.none:
            self.take(result.assignment)
        return result

    def take(self, data: bytes) -> None:
        parsed = consumer_protocol.assignment_partitions(data)
        assert parsed is not None
        self.owned = frozenset(parsed.get(T, ()))

    def heartbeat(self, now: int) -> ErrorCode:
        result = reply(
            self.c.handle(1, Heartbeat("g", self.generation, self.member_id, self.instance_id), now)
        )
        assert isinstance(result, HeartbeatResult)
        return result.error


def reply(fx: Effects) -> object:
    ((_, result),) = fx.replies
    return result


def classic_group(
    c: GroupCoordinator,
    n: int = 3,
    cooperative: bool = False,
    static: bool = False,
    split: dict[int, tuple[int, ...]] | None = None,
) -> list[Classic]:
    """n classic consumers form a group at generation 1; the leader assigns range-style (or
    member i gets `split[i]`)."""
    clients = [Classic(c, f"c{i}", cooperative, static) for i in range(n)]
    for i, client in enumerate(clients):
        c.handle(10 + i, client.join_cmd(), 0)
    fx = c.expire(0)  # the initial delay (0 ms) ends the join phase
    for reply_to, result in fx.replies:
        assert isinstance(result, JoinGroupResult)
        clients[reply_to - 10].joined(result)
    split = {0: (0, 1), 1: (2,), 2: (3,)} if split is None else split
    leader = next(cl for cl in clients if c.state.groups["g"].leader_id == cl.member_id)
    assignments = tuple(
        SyncAssignment(cl.member_id, assignment(*split.get(i, ()))) for i, cl in enumerate(clients)
    )
    for cl in clients:
        cmd = SyncGroup("g", cl.generation, cl.member_id, cl.instance_id, "consumer",
                        cl.protocol, assignments if cl is leader else (), 5)  # fmt: skip
        c.handle(20 + clients.index(cl), cmd, 0)
    assert c.state.groups["g"].state is GroupState.STABLE
    for i, cl in enumerate(clients):
        cl.owned = frozenset(split.get(i, ()))
    return clients


def consumer_join(c: GroupCoordinator, mid: str, now: int) -> tuple[HeartbeatResponse, Effects]:
    cmd = ConsumerGroupHeartbeat("g", mid, 0, rebalance_timeout_ms=REBALANCE_MS,
                                 subscribed_topic_names=(T,), topic_partitions=())  # fmt: skip
    fx = c.handle(1, cmd, now)
    result = reply(fx)
    assert isinstance(result, HeartbeatResponse)
    return result, fx


def consumer_heartbeat(c: GroupCoordinator, mid: str, epoch: int, owned: frozenset[int],
                       now: int) -> HeartbeatResponse:  # fmt: skip
    from coordinator.core.consumer.records import TopicPartitions

    tps = (TopicPartitions(TID, tuple(sorted(owned))),) if owned else ()
    result = reply(c.handle(1, ConsumerGroupHeartbeat("g", mid, epoch, topic_partitions=tps), now))
    assert isinstance(result, HeartbeatResponse)
    return result


def never_twice(clients: list[Classic], *others: frozenset[int]) -> None:
    seen: list[int] = [p for cl in clients for p in cl.owned] + [p for o in others for p in o]
    assert len(seen) == len(set(seen)), seen


def owned_of(response: HeartbeatResponse, before: frozenset[int]) -> frozenset[int]:
    if response.assignment is None:
        return before
    return frozenset(p for tp in response.assignment for p in tp.partitions)


def test_a_consumer_member_upgrades_the_classic_group_and_the_classic_members_roll() -> None:
    c = core()
    clients = classic_group(c)
    commit = OffsetCommit("g", 1, clients[0].member_id, None, -1,
                          (CommitTopic(T, (CommitPartition(0, 42, -1, ""),)),), 7)  # fmt: skip
    assert isinstance(reply(c.handle(1, commit, 0)), OffsetCommitResult)

    response, fx = consumer_join(c, "n1", 100)
    assert response.error is E.none
    # The classic group's tombstone first, then the consumer group's records, atomically.
    assert fx.records[0] == Record(GroupMetadataKey("g"), None)
    assert "g" not in c.state.groups and "g" in c.consumer.groups
    group = c.consumer.groups["g"]
    check_group(group)
    assert set(group.members) == {cl.member_id for cl in clients} | {"n1"}
    first = group.members[clients[0].member_id]
    assert first.classic is not None and first.classic.session_timeout_ms == SESSION_MS
    assert first.classic.supported_protocols[0].name == "range"
    assert dict(first.assigned_partitions) == {TID: frozenset({0, 1})}
    assert group.group_epoch == 2 and response.member_epoch == 2
    n1 = owned_of(response, frozenset())
    assert not n1  # every partition is still held by a classic member
    assert c.committed_offsets("g")[(T, 0)].offset == 42  # the offsets stay

    # The classic members hear "rebalance" and rejoin one by one; partitions move only when
    # their holder rejoined without them.
    now = 200
    for cl in clients:
        assert cl.heartbeat(now) is E.rebalance_in_progress
        joined = cl.rejoin(now)
        assert (joined.protocol_type, joined.protocol_name, joined.leader) == (
            "consumer",
            "range",
            "",
        )
        assert joined.generation_id == 2
        assert cl.sync(now).error is E.none
        assert cl.heartbeat(now) is E.none
        n1 = owned_of(consumer_heartbeat(c, "n1", 2, n1, now), n1)
        never_twice(clients, n1)
        check_group(group)
        now += 100
    assert [*sorted(len(cl.owned) for cl in clients), len(n1)] == [1, 1, 1, 1]
    assert group.state.value == "Stable"
    # A classic member's commit is checked against its generation (any OffsetCommit version).
    stale = OffsetCommit("g", 1, clients[0].member_id, None, -1, commit.topics, 7)
    result = reply(c.handle(1, stale, now))
    assert isinstance(result, OffsetCommitResult)
    assert result.topics[0].partitions[0].error is E.illegal_generation


def test_a_cooperative_member_revokes_before_anyone_gets_its_partitions() -> None:
    c = core()
    clients = classic_group(c, cooperative=True)
    response, _ = consumer_join(c, "n1", 0)
    n1 = owned_of(response, frozenset())
    group = c.consumer.groups["g"]
    target = group.target_assignment["n1"][TID]
    (holder,) = [cl for cl in clients if cl.owned & target]
    # Its rejoin reports what it owns: it is told to revoke (UNREVOKED_PARTITIONS) and the
    # SyncGroup gives it only what it keeps; nobody gets the partition yet.
    holder.rejoin(10)
    assert group.members[holder.member_id].state.name == "UNREVOKED_PARTITIONS"
    assert holder.sync(10).error is E.none
    assert not (holder.owned & target)
    n1 = owned_of(consumer_heartbeat(c, "n1", 2, n1, 10), n1)
    assert not n1
    assert holder.heartbeat(20) is E.rebalance_in_progress  # rejoin to finish revoking
    holder.rejoin(30)
    assert holder.sync(30).error is E.none
    n1 = owned_of(consumer_heartbeat(c, "n1", 2, n1, 40), n1)
    assert n1 == target
    never_twice(clients, n1)


def test_classic_members_keep_their_own_session_and_join_timeouts() -> None:
    c = core()
    clients = classic_group(c)
    consumer_join(c, "n1", 0)
    group = c.consumer.groups["g"]
    # c0 heartbeats at 5 s: told to rejoin, it never does; the join timer (its rebalance
    # timeout) fences it. c1 and c2 stop heartbeating: their 6 s session timeout fences them.
    assert clients[0].heartbeat(5_000) is E.rebalance_in_progress
    consumer_heartbeat(c, "n1", 2, frozenset(), 5_000)
    c.expire(6_000)
    assert set(group.members) == {clients[0].member_id, "n1"}
    for t in range(9_000, 25_000, 4_000):
        consumer_heartbeat(c, "n1", group.members["n1"].member_epoch, frozenset(), t)
        assert clients[0].heartbeat(t) in (E.rebalance_in_progress, E.illegal_generation)
    c.expire(25_000)
    assert set(c.consumer.groups["g"].members) == {"n1"}


def test_the_last_consumer_member_leaving_downgrades_to_a_classic_group() -> None:
    c = core()
    clients = classic_group(c)
    consumer_join(c, "n1", 0)
    for cl in clients:
        cl.rejoin(50)
        cl.sync(50)
    epoch = c.consumer.groups["g"].group_epoch
    fx = c.handle(1, ConsumerGroupHeartbeat("g", "n1", -1), 100)
    assert isinstance(reply(fx), HeartbeatResponse)
    assert "g" not in c.consumer.groups and "g" in c.state.groups
    group = c.state.groups["g"]
    assert group.state is GroupState.PREPARING_REBALANCE
    assert group.protocol_type == "consumer" and group.protocol_name == "range"
    assert set(group.members) == {cl.member_id for cl in clients}
    assert group.members[clients[0].member_id].session_timeout_ms == SESSION_MS
    assert any(r.key == GroupMetadataKey("g") and r.value is not None for r in fx.records)
    assert group.generation_id == epoch  # the reconciled members' generation
    # The classic members rejoin the classic way and the group completes a classic rebalance.
    assert clients[0].heartbeat(200) is E.rebalance_in_progress
    for i, cl in enumerate(clients):
        c.handle(30 + i, cl.join_cmd(), 300)
    assert group.state is GroupState.COMPLETING_REBALANCE
    assert group.generation_id == epoch + 1  # Kafka's: the consumer group's epoch, then + 1


def test_a_consumer_member_s_session_expiry_downgrades_too_and_replay_agrees() -> None:
    c = core()
    records: list[Record] = []

    def run(fx: Effects) -> Effects:
        records.extend(fx.records)
        return fx

    clients = classic_group(c)
    records.extend(c.group_record(c.state.groups["g"], 0) for _ in (0,))
    cmd = ConsumerGroupHeartbeat("g", "n1", 0, rebalance_timeout_ms=REBALANCE_MS,
                                 subscribed_topic_names=(T,), topic_partitions=())  # fmt: skip
    run(c.handle(1, cmd, 0))
    for cl in clients:
        run(c.handle(1, cl.join_cmd(), 100))
        cl.generation = c.consumer.groups["g"].members[cl.member_id].member_epoch
    live = snapshot(c.consumer.groups["g"])
    # The log so far rebuilds the consumer group, ClassicMemberMetadata included.
    replayed = core()
    for r in records:
        replayed.replay(r)
    replayed.finish_loading(0)
    assert "g" not in replayed.state.groups
    assert snapshot(replayed.consumer.groups["g"]) == live
    # n1 stops heartbeating; the classic members go on: n1's session (10 s) expires and only
    # classic members remain: the group is a classic group again.
    for t in (4_000, 8_000):
        for cl in clients:
            cl.heartbeat(t)
    run(c.expire(10_000))
    assert "g" not in c.consumer.groups
    assert set(c.state.groups["g"].members) == {cl.member_id for cl in clients}
    replayed = core()
    for r in records:
        replayed.replay(r)
    replayed.finish_loading(0)
    assert "g" not in replayed.consumer.groups
    assert set(replayed.state.groups["g"].members) == {cl.member_id for cl in clients}


def test_policy_disabled_refuses_the_upgrade_and_upgrade_only_keeps_the_consumer_group() -> None:
    c = core("disabled")
    classic_group(c)
    response, fx = consumer_join(c, "n1", 0)
    assert response.error is E.group_id_not_found and not fx.records
    assert c.state.groups["g"].state is GroupState.STABLE

    c = core("upgrade")
    classic_group(c)
    assert consumer_join(c, "n1", 0)[0].error is E.none
    c.handle(1, ConsumerGroupHeartbeat("g", "n1", -1), 10)
    assert "g" in c.consumer.groups and len(c.consumer.groups["g"].members) == 3


def test_a_refused_heartbeat_leaves_the_classic_group_as_it_was() -> None:
    c = core()
    classic_group(c)
    bad = ConsumerGroupHeartbeat("g", "n1", 0, rebalance_timeout_ms=REBALANCE_MS,
                                 subscribed_topic_regex="(", topic_partitions=())  # fmt: skip
    fx = c.handle(1, bad, 0)
    result = reply(fx)
    assert isinstance(result, HeartbeatResponse) and result.error is E.invalid_regular_expression
    assert not fx.records and "g" not in c.consumer.groups
    assert c.state.groups["g"].state is GroupState.STABLE
    # A heartbeat that is not a join never converts.
    result = reply(c.handle(1, ConsumerGroupHeartbeat("g", "n1", 3), 0))
    assert isinstance(result, HeartbeatResponse) and result.error is E.group_id_not_found


def test_classic_join_of_a_consumer_group_and_leave() -> None:
    c = core()
    response, _ = consumer_join(c, "n1", 0)
    n1 = owned_of(response, frozenset())
    newcomer = Classic(c, "late")
    cmd = newcomer.join_cmd()
    v4 = JoinGroup(cmd.group_id, cmd.session_timeout_ms, cmd.rebalance_timeout_ms, "", None,
                   "consumer", cmd.protocols, None, "late", "/h", 4)  # fmt: skip
    first = reply(c.handle(1, v4, 0))
    assert isinstance(first, JoinGroupResult) and first.error is E.member_id_required
    newcomer.member_id = first.member_id
    wrong = JoinGroup("g", SESSION_MS, REBALANCE_MS, "", None, "consumer",
                      (Protocol("range", b"\x00"),), None, "x", "/h", 3)  # fmt: skip
    assert reply(c.handle(1, wrong, 0)) == JoinGroupResult(E.unknown_server_error, member_id="")
    joined = newcomer.rejoin(0)
    assert joined.generation_id == c.consumer.groups["g"].members[newcomer.member_id].member_epoch
    assert newcomer.sync(0).error is E.none
    n1 = owned_of(consumer_heartbeat(c, "n1", response.member_epoch, n1, 10), n1)
    never_twice([newcomer], n1)
    left = reply(c.handle(1, LeaveGroup("g", (LeavingMember(newcomer.member_id, None),
                                                LeavingMember("n1", None)), 3), 20))  # fmt: skip
    assert isinstance(left, LeaveGroupResult)
    assert [m.error for m in left.members] == [E.none, E.unknown_member_id]  # n1: not classic
    assert set(c.consumer.groups["g"].members) == {"n1"}


def test_records_of_an_upgrade_are_consumer_group_records() -> None:
    c = core()
    classic_group(c)
    _, fx = consumer_join(c, "n1", 0)
    kinds = [type(r.key).__name__ for r in fx.records]
    assert kinds[0] == "GroupMetadataKey"
    assert all(k.startswith("ConsumerGroup") for k in kinds[1:])
    assert isinstance(ConsumerGroupRecord(fx.records[1].key, fx.records[1].value).record_type, int)  # type: ignore[arg-type]


def test_a_static_classic_member_restarted_with_the_consumer_protocol_takes_its_place() -> None:
    """The rolling upgrade of static members: the consumer-protocol instance takes over the
    classic member's instance id at once (no UNRELEASED_INSTANCE_ID), with its assignment."""
    c = core()
    clients = classic_group(c, static=True)
    cmd = ConsumerGroupHeartbeat("g", "n0", 0, instance_id="c0", rebalance_timeout_ms=REBALANCE_MS,
                                 subscribed_topic_names=(T,), topic_partitions=())  # fmt: skip
    response = reply(c.handle(1, cmd, 0))
    assert isinstance(response, HeartbeatResponse) and response.error is E.none
    group = c.consumer.groups["g"]
    assert clients[0].member_id not in group.members
    assert group.static_members["c0"] == "n0" and group.members["n0"].classic is None
    assert owned_of(response, frozenset()) <= {0, 1}  # c0's partitions, nothing of the others
    check_group(group)
    # The old classic instance is fenced.
    assert clients[0].heartbeat(10) is E.fenced_instance_id


def test_describe_groups_v6_of_a_consumer_group_and_of_an_unknown_group() -> None:
    """DescribeGroups v6 (KIP-1043): a group that is not a classic group (a KIP-848 group, as
    Kafka's GroupMetadataManager.classicGroup refuses it) and an unknown group are
    GROUP_ID_NOT_FOUND with Kafka's messages; before v6 both are a Dead group without error."""
    from coordinator.core.messages import DescribeGroups, DescribeGroupsResult

    c = core()
    response, _ = consumer_join(c, "m1", 0)
    assert response.error is E.none
    for version in (5, 6):
        result = reply(c.handle(1, DescribeGroups(("g", "nobody"), version), 0))
        assert isinstance(result, DescribeGroupsResult)
        got = [(d.error, d.group_id, d.state, d.error_message) for d in result.groups]
        if version == 6:
            assert got == [
                (E.group_id_not_found, "g", "Dead", "Group g is not a classic group."),
                (E.group_id_not_found, "nobody", "Dead", "Group nobody not found."),
            ]
        else:
            assert [(e, g, s) for e, g, s, _ in got] == [
                (E.none, "g", "Dead"),
                (E.none, "nobody", "Dead"),
            ]


def test_the_last_consumer_member_replaced_by_a_static_classic_one_downgrades_at_once() -> None:
    """The rolling downgrade of static members (Kafka's
    validateOnlineDowngradeWithReplacedMemberId): the classic instance that takes the place of
    the last consumer-protocol member turns the group back into a classic group in that very
    JoinGroup, Stable at the group epoch, no rebalance, its partitions the replaced member's."""
    c = core()
    clients = classic_group(c, static=True)
    cmd = ConsumerGroupHeartbeat("g", "n0", 0, instance_id="c0", rebalance_timeout_ms=REBALANCE_MS,
                                 subscribed_topic_names=(T,), topic_partitions=())  # fmt: skip
    response = reply(c.handle(1, cmd, 0))
    assert isinstance(response, HeartbeatResponse) and response.error is E.none
    epoch = c.consumer.groups["g"].group_epoch
    target = c.consumer.groups["g"].target_assignment["n0"]
    back = Classic(c, "c0", static=True)  # the instance restarted with the classic protocol
    joined = back.rejoin(100)
    assert joined.error is E.none
    assert "g" not in c.consumer.groups
    group = c.state.groups["g"]
    assert group.state is GroupState.STABLE and group.generation_id == epoch
    assert set(group.members) == {back.member_id, clients[1].member_id, clients[2].member_id}
    assert back.sync(100).error is E.none
    assert back.owned == frozenset(p for ps in target.values() for p in ps)
    assert clients[1].heartbeat(200) is E.none  # nobody else rebalances

"""The admin APIs over every kind of group in one core (classic, KIP-848 consumer, KIP-932 share),
pinned where `make mutation` found them loose (issue 36: `handlers/groups._list` and `delete`,
`handlers/consumer.describe` and `delete`, `handlers/offset_fetch._group`'s member checks,
`handlers/offset_commit._consumer_error`, `handlers/classic_in_consumer.leave`): each answer
whole, with its group ids in request order, and the records and events each deletion writes.
Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core import txn_offsets as t
from coordinator.core.consumer.messages import (
    ConsumerGroupDescribe,
    ConsumerGroupHeartbeat,
    DescribedConsumerGroup,
)
from coordinator.core.consumer.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupTargetAssignmentMetadataKey,
)
from coordinator.core.events import GroupDeleted, RebalanceStarted
from coordinator.core.messages import (
    DeletedGroup,
    FetchedGroup,
    FetchGroup,
    LeaveGroup,
    LeavingMember,
    ListedGroup,
    OffsetFetch,
)
from coordinator.core.messages import (
    ErrorCode as E,
)
from coordinator.core.records import GroupMetadataKey, OffsetCommitKey, Record, TxnOffsetKey
from coordinator.core.share.messages import ShareGroupHeartbeat
from coordinator.core.share.records import (
    ShareGroupMetadataKey,
    ShareGroupTargetAssignmentMetadataKey,
)
from coordinator.core.share.state_records import SharePartitionStateKey
from tests.core.test_pin_consumer_classic import classic_in_consumer_group
from tests.support.fakeclock import Harness


def consumer_member(h: Harness, gid: str, mid: str) -> int:
    """A KIP-848 member of `gid` on `payments`; -> its member epoch."""
    cmd = ConsumerGroupHeartbeat(gid, mid, 0, rebalance_timeout_ms=5_000,
                                 subscribed_topic_names=("payments",),
                                 topic_partitions=())  # fmt: skip
    epoch: int = h.call(cmd).member_epoch
    return epoch


def share_group(h: Harness, gid: str, leave: bool) -> None:
    h.call(ShareGroupHeartbeat(gid, "s1", 0, None, ("payments",)))
    if leave:
        h.call(ShareGroupHeartbeat(gid, "s1", -1))


def test_list_groups_names_share_groups_by_type_and_state() -> None:
    h = Harness()
    h.commit("simple", {("payments", 0): 1})
    consumer_member(h, "cg", "m1")
    share_group(h, "busy", leave=False)
    share_group(h, "idle", leave=True)

    def listed(states: tuple[str, ...] = (), types: tuple[str, ...] = ()) -> list[ListedGroup]:
        result = h.list_groups(states, types)
        assert result.error is E.none
        return sorted(result.groups, key=lambda g: g.group_id)  # type: ignore[no-any-return]

    busy = ListedGroup("busy", "share", "Stable", "share")
    idle = ListedGroup("idle", "share", "Empty", "share")
    cg = ListedGroup("cg", "consumer", "Stable", "consumer")
    simple = ListedGroup("simple", "", "Empty", "classic")
    assert listed() == [busy, cg, idle, simple]
    assert listed(types=("Share",)) == [busy, idle]  # any case, as Kafka
    assert listed(types=("share", "classic")) == [busy, idle, simple]
    assert listed(types=("consumer",)) == [cg]
    assert listed(states=("EMPTY",)) == [idle, simple]
    assert listed(states=("stable",), types=("share",)) == [busy]
    assert listed(states=("dead",), types=("share",)) == []


def test_delete_groups_of_every_kind_answers_each_id_in_order() -> None:
    h = Harness()
    share_group(h, "busy", leave=False)
    share_group(h, "idle", leave=True)
    payments = h.catalog.get("payments")
    assert payments is not None
    h.core.share.share_partition("idle", payments.topic_id, 1, 0)
    consumer_member(h, "cg", "m1")
    h.commit("simple", {("payments", 0): 1})
    h.records.clear()
    h.events.clear()
    busy = ListedGroup("busy", "share", "Stable", "share")
    assert h.delete_groups("busy", "idle", "cg", "simple", "nope") == (
        DeletedGroup("busy", E.non_empty_group),
        DeletedGroup("idle", E.none),
        DeletedGroup("cg", E.non_empty_group),
        DeletedGroup("simple", E.none),
        DeletedGroup("nope", E.group_id_not_found),
    )
    # The empty share group: its share partitions' state, its assignment metadata and its
    # metadata tombstoned, and it is gone; the busy one is untouched.
    assert h.records == [
        Record(SharePartitionStateKey("idle", payments.topic_id, 1), None),
        Record(ShareGroupTargetAssignmentMetadataKey("idle"), None),
        Record(ShareGroupMetadataKey("idle"), None),
        Record(OffsetCommitKey("simple", "payments", 0), None),
        Record(GroupMetadataKey("simple"), None),
    ]
    assert h.events_of(GroupDeleted) == [GroupDeleted("idle"), GroupDeleted("simple")]
    assert set(h.core.share.groups) == {"busy"}
    assert h.list_groups((), ("share",)).groups == (busy,)
    # Loading: no group is looked at, every id answers COORDINATOR_LOAD_IN_PROGRESS.
    h.core.loading = True
    assert h.delete_groups("busy", "cg") == (
        DeletedGroup("busy", E.coordinator_load_in_progress),
        DeletedGroup("cg", E.coordinator_load_in_progress),
    )
    assert set(h.core.share.groups) == {"busy"} and "cg" in h.core.consumer.groups


def test_deleting_an_empty_consumer_group_tombstones_its_offsets_pending_and_records() -> None:
    h = Harness()
    epoch = consumer_member(h, "cg", "m1")
    h.commit("cg", {("payments", 0): 4, ("payments", 1): 5}, generation=epoch, member_id="m1")
    pending = t.TxnCommitTopic("payments", (t.TxnCommitPartition(1, 9, -1, "tx"),))
    h.core.txn_stage(t.TxnOffsetCommit("tx", "cg", 7, 0, -1, "", None, (pending,)), h.now)
    h.call(ConsumerGroupHeartbeat("cg", "m1", -1))
    h.records.clear()
    h.events.clear()
    assert h.delete_groups("cg", "other") == (
        DeletedGroup("cg", E.none), DeletedGroup("other", E.group_id_not_found))  # fmt: skip
    assert h.records == [
        Record(OffsetCommitKey("cg", "payments", 0), None),
        Record(OffsetCommitKey("cg", "payments", 1), None),
        Record(TxnOffsetKey("cg", "payments", 1, 7, 0), None),
        Record(ConsumerGroupTargetAssignmentMetadataKey("cg"), None),
        Record(ConsumerGroupMetadataKey("cg"), None),
    ]
    assert h.events_of(GroupDeleted) == [GroupDeleted("cg")]
    assert "cg" not in h.core.consumer.groups and not h.core.committed_offsets("cg")


def test_consumer_group_describe_answers_each_id_in_order() -> None:
    h = Harness()
    consumer_member(h, "cg", "m1")
    h.commit("simple", {("payments", 0): 1})
    out = h.call(ConsumerGroupDescribe(("", "simple", "none", "cg"))).groups
    assert out[:3] == (
        DescribedConsumerGroup("", E.invalid_group_id),
        DescribedConsumerGroup(
            "simple", E.group_id_not_found, "Group simple is not a consumer group."),
        DescribedConsumerGroup("none", E.group_id_not_found, "Group none not found."),
    )
    cg = out[3]
    assert (cg.group_id, cg.error, cg.error_message) == ("cg", E.none, None)
    assert cg.description == h.core.consumer.describe("cg")
    h.core.loading = True
    assert h.call(ConsumerGroupDescribe(("cg", "x"))).groups == (
        DescribedConsumerGroup("cg", E.coordinator_load_in_progress),
        DescribedConsumerGroup("x", E.coordinator_load_in_progress),
    )


def test_offset_fetch_checks_a_consumer_members_id_and_epoch() -> None:
    h = Harness()
    epoch = consumer_member(h, "cg", "m1")
    h.commit("cg", {("payments", 0): 4}, generation=epoch, member_id="m1")

    def fetch(member_id: str | None, member_epoch: int) -> FetchedGroup:
        group = FetchGroup("cg", None, member_id, member_epoch)
        result: FetchedGroup = h.call(OffsetFetch((group,), False, 9)).groups[0]
        return result

    ok = fetch("m1", epoch)
    assert (ok.error, ok.topics[0].partitions[0].offset) == (E.none, 4)
    assert fetch(None, -1).error is E.none  # an admin client: no member to check
    # Kafka's validateOffsetFetch: any member id, or any epoch >= 0 (0 included), is checked.
    assert fetch("stranger", -1) == FetchedGroup("cg", E.unknown_member_id, ())
    assert fetch(None, 0) == FetchedGroup("cg", E.unknown_member_id, ())
    assert fetch(None, epoch) == FetchedGroup("cg", E.unknown_member_id, ())
    assert fetch("m1", epoch + 1) == FetchedGroup("cg", E.stale_member_epoch, ())


def test_a_classic_member_of_a_consumer_group_fetches_with_its_generation() -> None:
    c, m = classic_in_consumer_group()
    fetch = OffsetFetch((FetchGroup("g", None, m.member_id, m.generation + 1),), False, 9)
    ((_, result),) = c.handle(1, fetch, 5).replies  # type: ignore[attr-defined]
    assert result.groups == (FetchedGroup("g", E.illegal_generation, ()),)


def test_offset_commit_with_generation_0_to_an_empty_consumer_group_is_refused() -> None:
    h = Harness()
    consumer_member(h, "cg", "m1")
    h.call(ConsumerGroupHeartbeat("cg", "m1", -1))
    assert not h.core.consumer.groups["cg"].members
    # Kafka's validateOffsetCommit lets only an epoch < 0 commit to an empty group unchecked.
    refused = h.commit("cg", {("payments", 0): 4}, generation=0, member_id="")
    assert refused.topics[0].partitions[0].error is E.unknown_member_id
    ok = h.commit("cg", {("payments", 0): 4}, generation=-1, member_id="")
    assert ok.topics[0].partitions[0].error is E.none


def test_a_classic_member_leaving_a_consumer_group_answers_its_request_and_rebalances() -> None:
    c, m = classic_in_consumer_group()
    fx = c.handle(7, LeaveGroup("g", (LeavingMember(m.member_id, None),), 5), 1_234)  # type: ignore[attr-defined]
    ((reply_to, result),) = fx.replies
    assert reply_to == 7 and result.error is E.none
    started = [e for e in fx.events if isinstance(e, RebalanceStarted)]
    assert [(e.group_id, e.now_ms) for e in started] == [("g", 1_234)]
    assert m.member_id not in c.consumer.groups["g"].members  # type: ignore[attr-defined]


def test_the_rebalance_a_classic_member_leaving_starts_is_timed_from_the_leave() -> None:
    from coordinator.core.consumer.records import TopicPartitions
    from coordinator.core.events import RebalanceCompleted
    from tests.core.test_consumer_migration import TID, owned_of

    c, m = classic_in_consumer_group()
    group = c.consumer.groups["g"]  # type: ignore[attr-defined]
    n1 = group.members["n1"]
    owned: frozenset[int] = frozenset()
    completed: list[RebalanceCompleted] = []

    def heartbeat_n1(now: int) -> None:
        nonlocal owned
        tps = (TopicPartitions(TID, tuple(sorted(owned))),) if owned else ()
        cmd = ConsumerGroupHeartbeat("g", "n1", n1.member_epoch, topic_partitions=tps)
        fx = c.handle(1, cmd, now)  # type: ignore[attr-defined]
        ((_, response),) = fx.replies
        owned = owned_of(response, owned)
        completed.extend(e for e in fx.events if isinstance(e, RebalanceCompleted))

    for now in range(100, 3_000, 100):  # both reconcile: the group is stable
        heartbeat_n1(now)
        if m.heartbeat(now) is not E.none:
            m.rejoin(now)
        m.sync(now)
        if str(group.state.value).lower() == "stable" and completed:
            break
    assert str(group.state.value).lower() == "stable"
    completed.clear()
    c.handle(7, LeaveGroup("g", (LeavingMember(m.member_id, None),), 5), 5_000)  # type: ignore[attr-defined]
    for now in range(6_000, 20_000, 1_000):  # n1 reconciles to the whole topic
        heartbeat_n1(now)
        if completed:
            break
    assert [(e.group_id, e.started_ms) for e in completed] == [("g", 5_000)]


def test_offset_delete_while_loading_refuses_a_share_or_consumer_group_id() -> None:
    h = Harness()
    share_group(h, "sg", leave=False)
    consumer_member(h, "cg", "m1")
    assert h.delete_offsets("sg", {"payments": (0,)}).error is E.group_id_not_found
    h.core.loading = True
    for gid in ("sg", "cg"):
        result = h.delete_offsets(gid, {"payments": (0,)})
        assert (result.error, result.topics) == (E.coordinator_load_in_progress, ())


def test_deleting_an_empty_classic_group_tombstones_its_pending_offsets_too() -> None:
    h = Harness()
    h.commit("simple", {("payments", 0): 4})
    pending = t.TxnCommitTopic("payments", (t.TxnCommitPartition(1, 9, -1, "tx"),))
    h.core.txn_stage(t.TxnOffsetCommit("tx", "simple", 7, 0, -1, "", None, (pending,)), h.now)
    h.records.clear()
    assert h.delete_groups("simple") == (DeletedGroup("simple", E.none),)
    assert h.records == [
        Record(OffsetCommitKey("simple", "payments", 0), None),
        Record(TxnOffsetKey("simple", "payments", 1, 7, 0), None),
        Record(GroupMetadataKey("simple"), None),
    ]
    assert h.core.txn_pending("simple") == []

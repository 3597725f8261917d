"""A sidecar fleet moving state partitions of KIP-848 consumer groups and KIP-932 share groups
while the core serves (core.loading.load_groups and unload_groups), and the core's earliest timer
over every kind of group, pinned where `make mutation` found them loose (issue 36): a loaded
group's members get their session from the load, the groups already served keep theirs, and an
unloaded group is forgotten with its pending transactional offsets. Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core import txn_offsets as t
from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.records import Record, TopicKey
from coordinator.core.share.messages import ShareGroupHeartbeat
from tests.support.fakeclock import Harness

SESSION = 45_000  # the default consumer and share session timeouts


def consumer_join(h: Harness, gid: str, mid: str) -> None:
    h.call(ConsumerGroupHeartbeat(gid, mid, 0, rebalance_timeout_ms=5_000,
                                  subscribed_topic_names=("payments",),
                                  topic_partitions=()))  # fmt: skip


def share_join(h: Harness, gid: str, mid: str) -> None:
    h.call(ShareGroupHeartbeat(gid, mid, 0, None, ("payments",)))


def records_of(h: Harness, *groups: str) -> list[Record]:
    return [r for r in h.records if not isinstance(r.key, TopicKey) and r.key.group_id in groups]


def members(h: Harness) -> dict[str, set[str]]:
    consumer = {g: set(group.members) for g, group in h.core.consumer.groups.items()}
    share = {g: set(group.members) for g, group in h.core.share.groups.items()}
    return {g: ms for g, ms in (consumer | share).items() if ms}


def test_loaded_consumer_and_share_members_start_their_sessions_at_the_load() -> None:
    source = Harness()
    consumer_join(source, "cg", "m1")
    share_join(source, "sg", "s1")
    moved = records_of(source, "cg", "sg")
    h = Harness()
    consumer_join(h, "live", "m9")
    share_join(h, "slive", "s9")
    assert h.core.earliest_timer_ms() == h.core.next_deadline_ms() == 1_000 + SESSION
    h.now = 30_000
    h.absorb(h.core.load_groups(moved, h.now))
    assert members(h) == {"cg": {"m1"}, "sg": {"s1"}, "live": {"m9"}, "slive": {"s9"}}
    h.advance(50_000 - h.now)  # the served groups' sessions end; the loaded ones' do not
    assert members(h) == {"cg": {"m1"}, "sg": {"s1"}}
    assert h.core.earliest_timer_ms() is not None
    h.advance(30_000 + SESSION + 1 - h.now)
    assert members(h) == {}


def test_the_earliest_timer_is_a_consumer_or_a_share_members_session() -> None:
    h = Harness()
    consumer_join(h, "cg", "m1")
    assert h.core.earliest_timer_ms() == h.core.consumer.next_deadline_ms()
    assert h.core.earliest_timer_ms() is not None
    other = Harness()
    share_join(other, "sg", "s1")
    assert other.core.earliest_timer_ms() == other.core.share.next_deadline_ms() == 1_000 + SESSION


def test_unloading_forgets_consumer_and_share_groups_and_their_pending_offsets() -> None:
    h = Harness()
    consumer_join(h, "cg", "m1")
    share_join(h, "sg", "s1")
    consumer_join(h, "stay", "m2")
    for gid in ("cg", "stay"):
        pending = t.TxnCommitTopic("payments", (t.TxnCommitPartition(0, 5, -1, f"tx-{gid}"),))
        h.core.txn_stage(t.TxnOffsetCommit(f"tx-{gid}", gid, 7, 0, -1, "", None, (pending,)),
                         h.now)  # fmt: skip
    fx = h.core.unload_groups(["cg", "sg"])
    assert (fx.records, fx.replies) == ([], [])
    assert "cg" not in h.core.consumer.groups and "sg" not in h.core.share.groups
    assert members(h) == {"stay": {"m2"}}
    assert h.core.state.txn_pending.drop_group("cg") == []
    assert [k.group_id for k in h.core.state.txn_pending.drop_group("stay")] == ["stay"]


def _assigned_after(change: str) -> dict[str, set[int]]:
    """A member of cg reading payments (2 partitions) and fresh (not a topic yet); then the
    change, and two heartbeats 6 s apart (the second one brings the new assignment)."""
    import uuid

    from coordinator.core.topics import TopicInfo

    h = Harness()
    h.call(ConsumerGroupHeartbeat("cg", "m1", 0, rebalance_timeout_ms=5_000,
                                  subscribed_topic_names=("payments", "fresh"),
                                  topic_partitions=()))  # fmt: skip
    payments = h.catalog.get("payments")
    assert payments is not None
    if change == "grown":
        grown = TopicInfo("payments", payments.topic_id, 4)
        h.absorb(h.core.topic_changed("payments", grown, h.now))
    else:
        h.absorb(h.core.declare_topics([TopicInfo("fresh", uuid.UUID(int=99), 3)], h.now))
    names = {payments.topic_id: "payments", uuid.UUID(int=99): "fresh"}
    assigned: dict[str, set[int]] = {}
    for _ in range(2):
        epoch = h.core.consumer.groups["cg"].members["m1"].member_epoch
        response = h.call(ConsumerGroupHeartbeat("cg", "m1", epoch))
        if response.assignment is not None:
            assigned = {names[tp.topic_id]: set(tp.partitions) for tp in response.assignment}
        h.now += 6_000
    return assigned


def test_a_consumer_group_sees_its_topics_change_at_its_next_heartbeats() -> None:
    assert _assigned_after("grown") == {"payments": {0, 1, 2, 3}}
    assert _assigned_after("declared") == {"payments": {0, 1}, "fresh": {0, 1, 2}}

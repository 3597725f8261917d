"""Loading KIP-848 consumer and KIP-932 share groups from the log (core.loading.replay and
finish_loading), and retention of a group that has only pending transactional offsets, pinned
where `make mutation` found them loose (issue 36). Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core import txn_offsets as t
from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.records import GroupMetadataKey, OffsetCommitKey, TopicKey
from coordinator.core.share.messages import ShareGroupHeartbeat
from tests.support.fakeclock import Harness

SESSION = 45_000  # the default share session timeout


def test_a_replayed_share_group_serves_and_its_sessions_start_at_the_load() -> None:
    source = Harness()
    source.call(ShareGroupHeartbeat("sg", "s1", 0, None, ("payments",)))
    h = Harness(now=100_000)
    for record in source.records:
        h.core.replay(record)
    h.core.finish_loading(h.now)
    group = h.core.share.groups["sg"]
    assert set(group.members) == {"s1"}
    assert group.members["s1"].subscribed_topic_names == source.core.share.groups[
        "sg"].members["s1"].subscribed_topic_names  # fmt: skip
    assert h.core.share.next_deadline_ms() == 100_000 + SESSION
    h.advance(SESSION - 1)
    assert set(h.core.share.groups["sg"].members) == {"s1"}
    h.advance(2)
    assert not h.core.share.groups["sg"].members


def test_a_consumer_groups_records_replace_the_empty_classic_group_its_offsets_made() -> None:
    source = Harness()
    source.commit("cg", {("payments", 0): 3})  # an empty classic group, then a consumer group
    source.call(ConsumerGroupHeartbeat("cg", "m1", 0, rebalance_timeout_ms=5_000,
                                       subscribed_topic_names=("payments",),
                                       topic_partitions=()))  # fmt: skip
    # A compacted log: the classic group's tombstone is gone, its offsets stay first.
    kept = [r for r in source.records
            if not isinstance(r.key, TopicKey | GroupMetadataKey)]  # fmt: skip
    assert isinstance(kept[0].key, OffsetCommitKey)
    h = Harness()
    for record in kept:
        h.core.replay(record)
    h.core.finish_loading(h.now)
    assert "cg" not in h.core.state.groups and "cg" in h.core.consumer.groups
    assert h.core.committed_offsets("cg")[("payments", 0)].offset == 3


def test_an_empty_group_with_only_pending_transactional_offsets_outlives_retention() -> None:
    h = Harness()
    h.advance(0)  # arms the retention check
    pending = t.TxnCommitTopic("payments", (t.TxnCommitPartition(0, 5, -1, "tx"),))
    h.core.txn_stage(t.TxnOffsetCommit("tx", "g", 7, 0, -1, "", None, (pending,)), h.now)
    h.advance(h.core.config.offsets_retention_check_interval_ms * 2)
    assert "g" in h.core.state.groups and h.core.state.txn_pending.has_group("g")
    assert not [r for r in h.records if isinstance(r.key, GroupMetadataKey)]
    h.absorb(h.core.txn_settle("g", [], h.core.txn_pending("g"))[0])  # aborted: nothing left
    h.advance(h.core.config.offsets_retention_check_interval_ms)
    assert "g" not in h.core.state.groups

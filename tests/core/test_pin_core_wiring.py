"""How the core wires its coordinators of each kind of group, pinned where `make mutation` found
it loose (issue 36: `GroupCoordinator.next_deadline_ms`, `CoreState.__post_init__`): the core's
next deadline (the server sleeps until that instant) includes a share member's session even when
no classic or consumer group has a timer sooner, and the consumer groups' records carry wall
clock times (the core's epoch offset), as the classic groups' do; the consumer and share groups
run with the core's settings (topic hash function, share session, interval, size, partition
settings), and a v0 consumer member's generated id is a bare uuid. Fake clock, no server.
"""

from __future__ import annotations

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.consumer.records import (
    ConsumerGroupMetadataKey,
    ConsumerGroupRegularExpressionKey,
)
from coordinator.core.effects import CoordinatorConfig
from coordinator.core.messages import ErrorCode as E
from coordinator.core.share.messages import ShareGroupHeartbeat
from coordinator.core.share.records import ShareGroupMetadataKey
from coordinator.core.share.values import SharePartitionConfig
from coordinator.core.topichash import group_hash, topic_hash, xxh3_64
from tests.support.fakeclock import EPOCH, Harness


def test_a_share_member_s_session_is_the_core_s_next_deadline() -> None:
    h = Harness()
    h.call(ShareGroupHeartbeat("sg", "s1", 0, None, ("payments",)))
    session = h.config.share_session_timeout_ms
    assert session < h.config.offsets_retention_check_interval_ms  # the classic timer is later
    assert h.core.next_deadline_ms() == h.now + session


def test_a_consumer_group_s_resolved_regex_is_stamped_with_the_wall_clock() -> None:
    h = Harness()
    join = ConsumerGroupHeartbeat("cg", "m1", 0, rebalance_timeout_ms=5_000,
                                  subscribed_topic_regex="pay.*", topic_partitions=())  # fmt: skip
    joined = h.call(join)  # the regex is resolved off this heartbeat, by the next one
    h.now += 1_000
    h.call(ConsumerGroupHeartbeat("cg", "m1", joined.member_epoch, topic_partitions=()))
    (record,) = [r for r in h.records if isinstance(r.key, ConsumerGroupRegularExpressionKey)]
    assert record.value is not None
    assert record.value.topics == ("payments",)  # type: ignore[union-attr]
    assert record.value.timestamp_ms == EPOCH + h.now  # type: ignore[union-attr]


def test_the_consumer_and_share_groups_hash_topics_with_the_core_s_function() -> None:
    h = Harness(CoordinatorConfig(topic_hash="xxh3"))
    topics = ("payments",)
    h.call(ConsumerGroupHeartbeat("cg", "m1", 0, rebalance_timeout_ms=5_000,
                                  subscribed_topic_names=topics, topic_partitions=()))  # fmt: skip
    h.call(ShareGroupHeartbeat("sg", "s1", 0, None, ("payments",)))
    info = h.catalog.get("payments")
    assert info is not None
    expected = group_hash({"payments": topic_hash(info, xxh3_64)}, xxh3_64)
    hashes = [r.value.metadata_hash for r in h.records  # type: ignore[union-attr]
              if isinstance(r.key, ConsumerGroupMetadataKey | ShareGroupMetadataKey)]  # fmt: skip
    assert hashes and set(hashes) == {expected}


def test_the_share_groups_run_with_the_core_s_share_settings() -> None:
    partition = SharePartitionConfig(record_lock_duration_ms=7_000, delivery_count_limit=3)
    config = CoordinatorConfig(share_session_timeout_ms=20_000, share_heartbeat_interval_ms=1_500,
                               share_max_size=1, share_partition=partition)  # fmt: skip
    h = Harness(config)
    joined = h.call(ShareGroupHeartbeat("sg", "s1", 0, None, ("payments",)))
    assert joined.heartbeat_interval_ms == 1_500
    assert h.core.next_deadline_ms() == h.now + 20_000
    assert h.call(ShareGroupHeartbeat("sg", "s2", 0, None, ("payments",))).error is (
        E.group_max_size_reached)  # fmt: skip
    assert h.core.share.partition_config("sg") == partition


def test_a_v0_consumer_member_s_generated_id_is_a_bare_uuid() -> None:
    h = Harness()
    cmd = ConsumerGroupHeartbeat("cg", "", 0, rebalance_timeout_ms=5_000,
                                 subscribed_topic_names=("payments",), topic_partitions=(),
                                 api_version=0)  # fmt: skip
    member_id = h.call(cmd).member_id
    # The Harness's ids are "<prefix>-<n>": with no prefix the id is "-<n>", less its dash.
    assert member_id == f"{h._ids:04d}"

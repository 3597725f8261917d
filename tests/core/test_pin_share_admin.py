"""KIP-932's offset admin APIs in the pure core (DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets), pinned whole: the answers of tests/share/test_share_admin.py's scenario
(compared there with Kafka 4.4's over a real server), every field and message, the records each
change writes, and the refusals by group kind and while loading. Fake clock, no server.

Written for mutation testing (issue 36, `make mutation`): each test fails on a change that the
rest of the fast suite let through.
"""

from __future__ import annotations

import uuid
from typing import Any

from coordinator.core.consumer.messages import ConsumerGroupHeartbeat
from coordinator.core.messages import ErrorCode as E
from coordinator.core.records import Record
from coordinator.core.share.admin_messages import (
    AlteredSharePartition,
    AlteredShareTopic,
    AlterShareGroupOffsets,
    AlterShareGroupOffsetsResult,
    DeletedShareTopic,
    DeleteShareGroupOffsets,
    DeleteShareGroupOffsetsResult,
    DescribedShareOffsetGroup,
    DescribedShareOffsetTopic,
    DescribedSharePartition,
    DescribeShareGroupOffsets,
    ShareOffsetsGroupRequest,
)
from coordinator.core.share.messages import ShareGroupHeartbeat
from coordinator.core.share.persisted import ShareSnapshot
from coordinator.core.share.records import ShareGroupMetadataKey, ShareGroupMetadataValue
from coordinator.core.share.state_records import SharePartitionStateKey, SharePartitionStateValue
from tests.support.fakeclock import Harness

UNKNOWN = "This server does not host this topic-partition."
ACCEPT, REJECT = 1, 3


def describe(h: Harness, *groups: tuple[str, tuple[tuple[str, tuple[int, ...]], ...] | None]
             ) -> tuple[DescribedShareOffsetGroup, ...]:
    request = DescribeShareGroupOffsets(tuple(ShareOffsetsGroupRequest(g, t) for g, t in groups))
    return h.call(request).groups  # type: ignore[no-any-return]


def alter(h: Harness, group: str, *topics: tuple[str, tuple[tuple[int, int], ...]]) -> Any:
    return h.call(AlterShareGroupOffsets(group, topics))


def delete(h: Harness, group: str, *topics: str) -> Any:
    return h.call(DeleteShareGroupOffsets(group, topics))


def share_member(h: Harness) -> Any:
    """A member of share group g on `payments` (2 partitions), with partition 1 in flight:
    offsets 10-11 accepted, 13 rejected (start 12, one more record done)."""
    h.call(ShareGroupHeartbeat("g", "m1", 0, None, ("payments",)))
    payments = h.catalog.get("payments")
    assert payments is not None
    part = h.core.share.share_partition("g", payments.topic_id, 1, 10)
    part.acquire("m1", [(10, 14)], 0, max_records=10)
    part.acknowledge("m1", [(10, 11, [ACCEPT]), (13, 13, [REJECT])], 0)
    return payments.topic_id


def test_describe_a_share_group_with_members_and_state() -> None:
    h = Harness()
    tid = share_member(h)
    p0, p1 = DescribedSharePartition(0), DescribedSharePartition(1, 12, 0, 1)
    # Every partition it has: with state (1) and assigned to a member (0, no state yet: -1).
    assert describe(h, ("g", None)) == (
        DescribedShareOffsetGroup("g", (DescribedShareOffsetTopic("payments", tid, (p0, p1)),)),)
    # Named ones: ascending, once each; an unknown topic has no id and no state.
    assert describe(h, ("g", (("payments", (1, 0, 1)), ("nope", (0,))))) == (
        DescribedShareOffsetGroup("g", (DescribedShareOffsetTopic("payments", tid, (p0, p1)),
                                        DescribedShareOffsetTopic("nope", None, (p0,)))),)
    # A changed offset is refused while the group has members.
    not_empty = (E.non_empty_group, "The group is not empty.")
    assert alter(h, "g", ("payments", ((0, 2),))) == AlterShareGroupOffsetsResult(*not_empty)
    assert delete(h, "g", "payments") == DeleteShareGroupOffsetsResult(*not_empty)


def test_alter_resets_partitions_of_an_empty_group_and_delete_drops_them() -> None:
    h = Harness()
    tid = share_member(h)
    h.call(ShareGroupHeartbeat("g", "m1", -1))
    written = len(h.records)
    # Unknown topics first, then the known ones with their partitions in request order.
    assert alter(h, "g", ("payments", ((7, 3), (0, 2))), ("nope", ((0, 2),))) == (
        AlterShareGroupOffsetsResult(topics=(
            AlteredShareTopic("nope", None, (AlteredSharePartition(0, E.unknown_topic_or_partition,
                                                                   UNKNOWN),)),
            AlteredShareTopic("payments", tid, (
                AlteredSharePartition(7, E.unknown_topic_or_partition, UNKNOWN),
                AlteredSharePartition(0))))))  # fmt: skip
    fresh = SharePartitionStateValue(ShareSnapshot(0, 0, 0, 2, 0, ()))
    assert h.records[written:] == [Record(SharePartitionStateKey("g", tid, 0), fresh)]
    # A partition with state: a new state epoch and snapshot epoch, in-flight records forgotten.
    state_before = h.core.share.partitions[("g", tid, 1)]
    state_before.leader_epoch = 4
    written = len(h.records)
    assert alter(h, "g", ("payments", ((1, -5), (0, 100)))).topics == (
        AlteredShareTopic("payments", tid, (AlteredSharePartition(1), AlteredSharePartition(0))),)
    assert h.records[written:] == [
        Record(SharePartitionStateKey("g", tid, 1),
               SharePartitionStateValue(ShareSnapshot(1, 1, 4, -5, 0, ()))),
        Record(SharePartitionStateKey("g", tid, 0),
               SharePartitionStateValue(ShareSnapshot(1, 1, 0, 100, 0, ()))),
    ]  # fmt: skip
    assert describe(h, ("g", (("payments", (0, 1)),)))[0].topics[0].partitions == (
        DescribedSharePartition(0, 100), DescribedSharePartition(1, -5, 4))
    written = len(h.records)
    assert delete(h, "g", "payments", "nope") == DeleteShareGroupOffsetsResult(topics=(
        DeletedShareTopic("payments", tid),
        DeletedShareTopic("nope", None, E.unknown_topic_or_partition, UNKNOWN)))
    assert h.records[written:] == [Record(SharePartitionStateKey("g", tid, 0), None),
                                   Record(SharePartitionStateKey("g", tid, 1), None)]
    assert h.core.share.partitions == {}
    assert describe(h, ("g", None)) == (DescribedShareOffsetGroup("g"),)


def test_alter_creates_an_unknown_group_and_delete_refuses_it() -> None:
    h = Harness()
    tid = h.catalog.get("payments").topic_id  # type: ignore[union-attr]
    assert alter(h, "g2", ("payments", ((0, 3),))).error == E.none
    assert h.records == [
        Record(ShareGroupMetadataKey("g2"), ShareGroupMetadataValue(0, 0)),
        Record(SharePartitionStateKey("g2", tid, 0),
               SharePartitionStateValue(ShareSnapshot(0, 0, 0, 3, 0, ()))),
    ]  # fmt: skip
    assert h.core.share.groups["g2"].group_epoch == 0
    assert delete(h, "nope", "payments") == DeleteShareGroupOffsetsResult(
        E.group_id_not_found, "Group nope not found.")
    assert alter(h, "", ("payments", ((0, 3),))) == AlterShareGroupOffsetsResult(
        E.invalid_group_id)
    assert delete(h, "", "payments") == DeleteShareGroupOffsetsResult(E.invalid_group_id)
    assert len(h.records) == 2


def test_a_classic_or_consumer_group_id_is_not_a_share_group() -> None:
    h = Harness()
    h.commit("classic", {("payments", 0): 5})  # an Empty classic group holding offsets
    h.call(ConsumerGroupHeartbeat("consumer", "c1", 0, rebalance_timeout_ms=30_000,
                                  subscribed_topic_names=("payments",), topic_partitions=()))
    assert "classic" in h.core.state.groups and "consumer" in h.core.state.consumer.groups
    for gid in ("classic", "consumer"):
        not_share = (E.group_id_not_found, f"Group {gid} is not a share group.")
        assert alter(h, gid, ("payments", ((0, 3),))) == AlterShareGroupOffsetsResult(*not_share)
        assert delete(h, gid, "payments") == DeleteShareGroupOffsetsResult(*not_share)
        # Describe answers NONE with no state (Kafka's answer for any group id).
        assert describe(h, (gid, (("payments", (0,)),)))[0].topics[0].partitions == (
            DescribedSharePartition(0),)
        assert describe(h, (gid, None)) == (DescribedShareOffsetGroup(gid),)


def test_while_loading_every_request_is_refused() -> None:
    h = Harness()
    h.core.loading = True
    loading = E.coordinator_load_in_progress
    assert describe(h, ("g", None), ("h", (("payments", (0,)),))) == (
        DescribedShareOffsetGroup("g", (), loading), DescribedShareOffsetGroup("h", (), loading))
    assert alter(h, "g", ("payments", ((0, 3),))) == AlterShareGroupOffsetsResult(loading)
    assert delete(h, "g", "payments") == DeleteShareGroupOffsetsResult(loading)
    assert h.records == []


def test_several_groups_and_topics_in_one_request() -> None:
    h = Harness()
    tid = share_member(h)  # g: payments 0 assigned, payments 1 with state
    orders = h.catalog.get("orders").topic_id  # type: ignore[union-attr]
    audit = h.catalog.get("audit").topic_id  # type: ignore[union-attr]
    h.call(ShareGroupHeartbeat("g", "m1", 1, None, ("payments", "audit")))
    h.core.share.share_partition("g", orders, 2)
    h.core.share.share_partition("g2", tid, 0)
    h.core.share.share_partition("g", uuid.UUID(int=99), 0)  # a topic since deleted
    (g,) = describe(h, ("g", None))
    assert [(t.name, [p.partition for p in t.partitions]) for t in g.topics] == [
        ("audit", [0]), ("orders", [2]), ("payments", [0, 1])]
    h.call(ShareGroupHeartbeat("g", "m1", -1))
    # An unknown topic first does not stop the others.
    got = alter(h, "g", ("nope", ((0, 1),)), ("orders", ((2, 7),)))
    assert [t.name for t in got.topics] == ["nope", "orders"]
    assert got.topics[1].partitions == (AlteredSharePartition(2),)
    got = delete(h, "g", "nope", "payments")
    assert got.topics == (DeletedShareTopic("nope", None, E.unknown_topic_or_partition, UNKNOWN),
                          DeletedShareTopic("payments", tid))
    # Only g's payments partitions went: its orders partition and g2's stay.
    assert sorted((k[0], k[2]) for k in h.core.share.partitions if k[1] != uuid.UUID(int=99)) == [
        ("g", 2), ("g2", 0)]
    assert audit not in {k[1] for k in h.core.share.partitions}

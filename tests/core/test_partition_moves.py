"""A sidecar fleet moves state partitions while the core serves (core.loading.load_groups and
unload_groups; coordinator.sidecar.fleet): what is unloaded is forgotten and its parked requests
get NOT_COORDINATOR; what is loaded serves at once, other groups untouched."""

from __future__ import annotations

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.messages import ErrorCode, JoinGroupResult, SyncGroupResult
from coordinator.core.records import GroupMetadataKey, OffsetCommitKey, Record, TopicKey
from tests.support.fakeclock import Harness


def records_of(h: Harness, group: str) -> list[Record]:
    return [r for r in h.records
            if not isinstance(r.key, TopicKey) and r.key.group_id == group]


def test_unloading_forgets_the_groups_and_answers_their_parked_requests() -> None:
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    ids, _, gen = h.stable_group("moving", 2)
    h.commit("moving", {("orders", 0): 7}, generation=gen, member_id=ids[0])
    staying, _, staying_gen = h.stable_group("staying", 1)
    h.commit("staying", {("orders", 1): 3}, generation=staying_gen, member_id=staying[0])
    # One member rejoins (parked until the other does), one member of a syncing group waits.
    parked_join = h.join("moving", ids[0])
    rts = [h.join_dynamic("syncing")[0] for _ in range(2)]
    h.advance(1)
    joined = [h.reply(rt) for rt in rts]
    follower = next(r.member_id for r in joined if r.member_id != r.leader)
    parked_sync = h.sync("syncing", follower, joined[0].generation_id)
    assert h.reply(parked_join) is None and h.reply(parked_sync) is None
    assert h.core.committed_offsets("moving")[("orders", 0)].offset == 7

    fx = h.absorb(h.core.unload_groups(["moving", "syncing", "never-loaded"]))
    assert fx.records == []  # the state stays on the partition for its next owner
    assert h.reply(parked_join) == JoinGroupResult(ErrorCode.not_coordinator)
    assert h.reply(parked_sync) == SyncGroupResult(ErrorCode.not_coordinator)
    assert h.core.group("moving") is None and h.core.group("syncing") is None
    assert h.core.committed_offsets("moving") == {}
    # Its timers died with it: nothing fires for it, nothing is written for it.
    before = len(h.records)
    h.advance(60_000)
    assert not [r for r in h.records[before:]
                if not isinstance(r.key, TopicKey) and r.key.group_id in ("moving", "syncing")]
    # The other group kept its offsets.
    assert h.core.committed_offsets("staying")[("orders", 1)].offset == 3


def test_loading_a_partition_serves_its_groups_beside_the_others() -> None:
    source = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    ids, _, gen = source.stable_group("arriving", 2)
    source.commit("arriving", {("orders", 2): 11}, generation=gen, member_id=ids[0])
    moved = records_of(source, "arriving")
    assert any(isinstance(r.key, GroupMetadataKey) for r in moved)
    assert any(isinstance(r.key, OffsetCommitKey) for r in moved)

    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    h.stable_group("resident", 1)
    fx = h.absorb(h.core.load_groups(moved, h.now))
    assert fx.replies == [] and not h.core.loading
    group = h.core.group("arriving")
    assert group is not None and group.state == "Stable" and group.generation_id == gen
    assert h.core.committed_offsets("arriving")[("orders", 2)].offset == 11
    # Its members heartbeat at once, and their sessions run: silent members expire.
    assert h.heartbeat("arriving", ids[0], gen).error is ErrorCode.none
    h.advance(source.config.session_timeout_min_ms * 20)
    gone = h.core.group("arriving")
    assert gone is not None and gone.state == "Empty"
    # The resident group was never disturbed by the load (only by its own expiry).
    assert h.core.group("resident") is not None


def test_a_group_deleted_later_in_the_partition_is_not_loaded() -> None:
    source = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    ids, _, _ = source.stable_group("short-lived", 1)
    source.leave("short-lived", (ids[0], None))
    assert source.delete_groups("short-lived")[0].error is ErrorCode.none
    h = Harness()
    h.absorb(h.core.load_groups(records_of(source, "short-lived"), h.now))
    assert h.core.group("short-lived") is None

"""A sidecar fleet moves state partitions while the core serves (core.loading.load_groups and
unload_groups; coordinator.sidecar.fleet): what is unloaded is forgotten and its parked requests
get NOT_COORDINATOR; what is loaded serves at once, other groups untouched."""

from __future__ import annotations

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import LeaveReason, MemberLeft, RebalanceCause, RebalanceStarted
from coordinator.core.messages import ErrorCode, JoinGroupResult, SyncGroupResult
from coordinator.core.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    Record,
    TopicKey,
    TopicValue,
)
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

    fx = h.absorb(h.core.unload_groups(["never-loaded", "moving", "syncing"]))
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


def moved_group(group: str, n: int = 2, session: int = 10_000) -> tuple[list[Record], list[str],
                                                                         int]:
    """A group formed on another member: its partition's records, member ids, generation."""
    source = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    ids, _, gen = source.stable_group(group, n, session=session)
    source.commit(group, {("orders", 2): 11}, generation=gen, member_id=ids[0])
    return records_of(source, group), ids, gen


def expired(h: Harness, group: str) -> set[str]:
    return {e.member_id for e in h.events_of(MemberLeft)
            if e.group_id == group and e.reason is LeaveReason.EXPIRED}


def test_loading_a_partition_serves_its_groups_beside_the_others() -> None:
    session = 10_000
    moved, ids, gen = moved_group("arriving", session=session)
    assert any(isinstance(r.key, GroupMetadataKey) for r in moved)
    assert any(isinstance(r.key, OffsetCommitKey) for r in moved)
    topic = Record(TopicKey("orders"), TopicValue(b"\x01" * 16, 9, ()))

    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    h.stable_group("resident", 1, session=60_000)
    # A topic record of the partition is skipped, not the end of the load.
    fx = h.absorb(h.core.load_groups([topic, *moved], h.now))
    assert fx.replies == [] and not h.core.loading
    assert h.core.topics.get("orders").partitions != 9  # topics come from the upstream
    group = h.core.group("arriving")
    assert group is not None and group.state == "Stable" and group.generation_id == gen
    assert h.core.committed_offsets("arriving")[("orders", 2)].offset == 11
    # Every loaded member's session runs from the load: silent, they expire a session later.
    h.advance(session - 1)
    assert expired(h, "arriving") == set()
    h.advance(2)
    assert expired(h, "arriving") == set(ids)
    assert h.core.group("resident") is not None and expired(h, "resident") == set()


def test_a_group_deleted_later_in_the_partition_is_not_loaded() -> None:
    source = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    ids, _, _ = source.stable_group("short-lived", 1)
    source.leave("short-lived", (ids[0], None))
    assert source.delete_groups("short-lived")[0].error is ErrorCode.none
    live, live_ids, _ = moved_group("lives-on")
    h = Harness()
    # The deleted group comes first: the groups after it are still started.
    h.absorb(h.core.load_groups([*records_of(source, "short-lived"), *live], h.now))
    assert h.core.group("short-lived") is None
    h.advance(10_001)
    assert expired(h, "lives-on") == set(live_ids)


def test_a_loaded_group_over_group_max_size_rebalances_and_one_at_it_does_not() -> None:
    moved, _, _ = moved_group("crowded", 2)
    for limit, state in ((1, "PreparingRebalance"), (2, "Stable")):
        h = Harness(CoordinatorConfig(max_group_size=limit))
        h.absorb(h.core.load_groups(moved, h.now))
        group = h.core.group("crowded")
        assert group is not None and group.state == state, limit
        started = [e for e in h.events_of(RebalanceStarted) if e.group_id == "crowded"]
        assert [e.cause for e in started] == ([RebalanceCause.GROUP_MAX_SIZE] if limit == 1
                                              else [])


def test_loading_arms_the_offsets_retention_timer_of_a_core_that_has_none() -> None:
    moved, _, _ = moved_group("first")
    h = Harness()
    assert h.core.state.timers.retention_seq == 0  # no request yet: nothing armed it
    h.absorb(h.core.load_groups(moved, h.now))
    armed = h.core.state.timers.retention_seq
    assert armed != 0
    # A later load leaves the armed check where it is (offsets expire on the same schedule).
    again, _, _ = moved_group("second")
    h.advance(1_000)
    h.absorb(h.core.load_groups(again, h.now))
    assert h.core.state.timers.retention_seq == armed


def test_a_core_that_is_loading_stays_loading() -> None:
    moved, _, _ = moved_group("early")
    h = Harness()
    h.core.loading = True
    h.absorb(h.core.load_groups(moved, h.now))
    assert h.core.loading is True

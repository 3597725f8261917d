"""The coordinator's entry points and timers, pinned where mutation testing found them loose
(issue 28, `make mutation`).

- `expire(now_ms)` fires every timer due by `now_ms` in one call (the runtime wakes once for a
  late deadline): a dead entry (a join or sync timer a completed phase disarmed) or the offsets
  retention check ahead of a live session deadline does not stop the rest.
- The Heartbeat hot path arms no timer; the same Heartbeat in `handle_many` renews the session.
- Without an epoch offset the wall clock is the monotonic one; topic records replay through
  the coordinator; a group record of a loaded group without a state timestamp takes the time
  it is written.
- The state timestamp is the time of the last state change (Kafka's currentStateTimestamp):
  the record the leader's SyncGroup writes carries the join phase's end, a later record the
  SyncGroup's time. A SyncGroup repeated in Stable answers the protocol type and name.
"""

from __future__ import annotations

import uuid

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.events import MemberLeft
from coordinator.core.messages import ErrorCode, Heartbeat, HeartbeatResult
from coordinator.core.records import GroupMetadataKey, GroupMetadataValue, TopicKey, TopicValue
from coordinator.core.topics import TopicInfo
from tests.core.test_pin_loading import load, member, value
from tests.support.fakeclock import EPOCH, Harness, catalog


def group_values(h: Harness) -> list[GroupMetadataValue]:
    out = []
    for r in h.records:
        if r.key == GroupMetadataKey("g") and isinstance(r.value, GroupMetadataValue):
            out.append(r.value)
    return out


def test_one_expire_call_fires_what_is_due_behind_dead_entries() -> None:
    # Sessions longer than the rebalance timeout: the disarmed join and sync entries (due at
    # +30 s) sit in the heap ahead of the live session entry (+45 s).
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    ids, _, _ = h.stable_group("g", 2, session=45_000)
    h.join("g", ids[0], session=45_000)  # the leader rejoins: a rebalance
    h.join("g", ids[1], session=45_000)
    leader = h.sync("g", ids[0], 2, {ids[0]: b"a", ids[1]: b"b"})
    h.sync("g", ids[1], 2)
    assert h.reply(leader).error.name == "none"
    start = h.now
    fx = h.core.expire(start + 60_000)  # one wake-up, past every deadline
    h.absorb(fx)
    assert sorted(e.member_id for e in fx.events if isinstance(e, MemberLeft)) == sorted(ids)


def test_one_expire_call_fires_a_session_due_after_the_retention_check() -> None:
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0,
                                  offsets_retention_check_interval_ms=5_000))  # fmt: skip
    ids, _, _ = h.stable_group("g", 1, session=10_000)
    fx = h.core.expire(h.now + 20_000)  # the retention check (due first), then the session
    h.absorb(fx)
    assert [e.member_id for e in fx.events if isinstance(e, MemberLeft)] == ids


def test_the_heartbeat_hot_path_arms_no_timer_and_handle_many_renews_the_session() -> None:
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    assert h.call(Heartbeat("g", 1, "m", None)).error.name == "unknown_member_id"
    assert h.core.earliest_timer_ms() is None  # a Heartbeat reached no handler's setup
    ids, _, generation = h.stable_group("g", 1, session=10_000)
    h.advance(9_000)
    fx = h.core.handle_many([(10_000, Heartbeat("g", generation, ids[0], None))], h.now)
    assert fx.replies == [(10_000, HeartbeatResult(ErrorCode.none))]
    h.advance(9_000)  # past the first deadline, not the renewed one
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]
    assert not h.events_of(MemberLeft)


def test_without_an_epoch_offset_record_times_are_the_clock() -> None:
    core = GroupCoordinator(CoordinatorConfig(), catalog(), lambda prefix: f"{prefix}-1")
    fx = core.handle(1, Harness.join_cmd("g"), 5_000)  # creates the group
    created = [r.value for r in fx.records if r.key == GroupMetadataKey("g")]
    assert [v.current_state_timestamp_ms for v in created] == [5_000]  # type: ignore[union-attr]


def test_topic_records_replay_through_the_coordinator() -> None:
    core = GroupCoordinator(CoordinatorConfig(), catalog(), lambda prefix: prefix, EPOCH)
    topic_id = uuid.UUID(int=77)
    core.replay_topic(TopicKey("fresh"), TopicValue(topic_id.bytes, 3, ()))
    assert core.topics.get("fresh") == TopicInfo("fresh", topic_id, 3)
    core.replay_topic(TopicKey("orders"), None)
    assert core.topics.get("orders") is None
    core.finish_loading(1_000)
    assert core.topics_loaded(1_000).records == []


def test_the_record_of_a_loaded_group_without_a_timestamp_takes_the_time_it_is_written() -> None:
    h = Harness()
    core = load(h, value(member("m1", 30_000), leader="m1", ts=-1))
    record = core.group_record(core.state.groups["g"], 7_000)
    assert record.value.current_state_timestamp_ms == EPOCH + 7_000  # type: ignore[union-attr]


def test_state_timestamps_are_the_times_of_the_state_changes() -> None:
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    r1 = h.join("g", instance="i1")
    r2 = h.join("g", instance="i2")
    joined_at = h.now  # the initial delay of 0 ends now: CompletingRebalance from here
    h.advance(1)
    a, b = h.reply(r1), h.reply(r2)
    h.advance(1_000)
    h.sync("g", b.member_id, a.generation_id, instance="i2")
    leader = h.sync("g", a.member_id, a.generation_id, {a.member_id: b"A", b.member_id: b"B"},
                    instance="i1")  # fmt: skip
    synced_at = h.now  # Stable from here
    result = h.reply(leader)
    assert (result.protocol_type, result.protocol_name) == ("consumer", "range")
    assert group_values(h)[-1].current_state_timestamp_ms == EPOCH + joined_at
    # A SyncGroup repeated in Stable answers the stored assignment with the protocol.
    again = h.reply(h.sync("g", b.member_id, a.generation_id, instance="i2"))
    assert (again.error.name, again.protocol_type, again.protocol_name, again.assignment) == (
        "none",
        "consumer",
        "range",
        b"B",
    )
    h.advance(5_000)
    # i2 restarts (a new member id, same protocols): no rebalance, a new record in Stable.
    h.call(h.join_cmd("g", instance="i2"))
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]
    assert group_values(h)[-1].current_state_timestamp_ms == EPOCH + synced_at

"""Rebalance timing and bookkeeping pinned where mutation testing found them loose (issue 28,
`make mutation`), each by a real sequence of requests and fake-clock ticks.

- Sessions: when a pending member's expiry completes the join, the sessions the join restarts
  are not expired in the same pass; a pending member's expiry does not complete a join a member
  still owes. Loaded members count as known, not new: a parked one is protected.
- The join phase: a group left with only static members that have not rejoined waits for them
  one rebalance timeout at a time, then completes with those that rejoined; the initial delay
  (KIP-134, docs/protocol.md §5.5) extends by what is left of the rebalance timeout, to the
  millisecond; a group whose last member left while an id is pending completes empty at once,
  and that pending member may still join then.
- Answers and events: a SyncGroup answered with an error carries no protocol; RebalanceCompleted
  names the protocol and the leader; a rejoin within TOPIC_DELETED_LABEL_MS of a deletion, to the
  millisecond, is labelled TOPIC_DELETED.
- Groups without a protocol: offsets of a group that never formed a generation expire from their
  own commit; a SyncGroup naming a protocol before one is chosen is answered as its state says.
"""

from __future__ import annotations

import uuid

import pytest

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import MemberLeft, RebalanceCause, RebalanceCompleted, RebalanceStarted
from coordinator.core.group import ClassicGroup, GroupState, IllegalStateTransition
from coordinator.core.messages import SyncGroupResult
from coordinator.core.rebalance import TOPIC_DELETED_LABEL_MS
from coordinator.core.records import GroupMetadataValue
from coordinator.core.topichash import group_hash, topic_hash_bytes, xxh3_64
from coordinator.core.topics import TopicInfo
from tests.core.test_pin_loading import load, member, value
from tests.core.test_topic_trigger import change
from tests.support.fakeclock import Harness, subscription

BOTH = (("range", subscription("orders", "payments")),)


def quiet(**kw: int | str) -> Harness:
    return Harness(CoordinatorConfig(initial_rebalance_delay_ms=0, **kw))  # type: ignore[arg-type]


def left(h: Harness) -> list[str]:
    return [e.member_id for e in h.events_of(MemberLeft)]


def test_sessions_the_join_restarted_are_not_expired_in_the_same_pass() -> None:
    h = quiet()
    ids, _, generation = h.stable_group("g", 2, session=10_000)
    h.advance(500)
    pending = h.call(h.join_cmd("g", client_id="p", session=6_000)).member_id
    a = h.join("g", ids[0], protocols=BOTH)  # a rebalance; both members rejoin at once
    b = h.join("g", ids[1], protocols=BOTH)
    assert h.reply(a) is None and pending  # waiting for the pending id
    # One wake-up past every deadline: the pending id's (first), then the members' sessions,
    # which its expiry restarted by completing the join.
    h.absorb(h.core.expire(h.now + 12_000))
    assert h.reply(a).generation_id == h.reply(b).generation_id == generation + 1
    assert left(h) == []
    assert h.core.group("g").state == "CompletingRebalance"  # type: ignore[union-attr]


def test_a_pending_expiry_does_not_complete_a_join_a_member_still_owes() -> None:
    h = quiet()
    ids, _, generation = h.stable_group("g", 2, session=30_000)
    pending = h.call(h.join_cmd("g", client_id="p", session=6_000)).member_id
    assert pending
    a = h.join("g", ids[0], protocols=BOTH)
    h.advance(6_000)  # the pending id expires; the other member has not rejoined yet
    assert h.reply(a) is None
    b = h.join("g", ids[1], protocols=BOTH)
    assert h.reply(a).generation_id == h.reply(b).generation_id == generation + 1
    assert left(h) == []


def test_a_loaded_member_parked_in_a_join_is_protected_from_its_session() -> None:
    h = quiet()
    two = (member("m1", 30_000), member("m2", 30_000))  # sessions of 10 s
    h.core = load(h, value(*two, leader="m1"))
    rt = h.join("g", "m1", protocols=BOTH)  # the leader rejoins; m2 never does
    h.advance(10_000)
    assert left(h) == ["m2"]
    result = h.reply(rt)
    assert result.error.name == "none" and result.generation_id == 4
    assert [m.member_id for m in result.members] == ["m1"]


def test_static_members_that_have_not_rejoined_are_waited_for_one_timeout_at_a_time() -> None:
    h = quiet()
    r1 = h.join("g", instance="s1", rebalance=8_000)
    r2 = h.join("g", instance="s2", rebalance=8_000)
    h.advance(1)
    s1, s2 = h.reply(r1).member_id, h.reply(r2).member_id
    d = h.join("g", version=3, rebalance=8_000)  # a dynamic member: a second rebalance
    rs1 = h.join("g", s1, instance="s1", rebalance=8_000)
    h.join("g", s2, instance="s2", rebalance=8_000)
    generation = h.reply(rs1).generation_id
    dyn = h.reply(d).member_id
    leader = h.reply(rs1).leader
    h.sync("g", s2, generation, instance="s2")
    h.sync("g", dyn, generation)
    h.sync("g", leader, generation, {s1: b"1", s2: b"2", dyn: b"3"}, instance="s1")
    h.leave("g", (dyn, None))  # a rebalance nobody rejoins at first
    for _ in range(3):  # two rebalance timeouts (8 s each) pass; the statics keep heartbeating
        h.advance(5_000)
        h.heartbeat("g", s1, generation, "s1")
        h.heartbeat("g", s2, generation, "s2")
    back = h.join("g", s1, instance="s1", rebalance=8_000)
    for _ in range(4):  # s2 heartbeats but never rejoins: the next timeout completes the join
        h.advance(3_000)
        h.heartbeat("g", s2, generation, "s2")
    result = h.reply(back)
    assert result is not None and result.error.name == "none"
    assert result.generation_id == generation + 1 and result.leader == s1


def test_the_initial_delay_extends_by_what_is_left_to_the_millisecond() -> None:
    # rebalance timeout 3001 ms, delay 3000 ms: 1 ms is left, and a new member takes it.
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=3_000))
    first = h.join("g", version=3, rebalance=3_001)
    h.advance(1_000)
    h.join("g", version=3, rebalance=3_001)
    h.advance(2_000)
    assert h.reply(first) is None
    h.advance(1)
    assert h.reply(first).error.name == "none"


def test_the_initial_delay_never_extends_past_the_rebalance_timeout() -> None:
    # rebalance timeout 7000 ms, delay 3000 ms: windows end at +3000, +6000 (3000 ms left,
    # then 1000) and +7000; a new member in the last window finds nothing left to extend by.
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=3_000))
    start = h.now
    first = h.join("g", version=3, rebalance=7_000)
    for step in (1_000, 3_000, 2_500):  # new members at +1000, +4000, +6500
        h.advance(step)
        h.join("g", version=3, rebalance=7_000)
    h.advance(start + 6_999 - h.now)
    assert h.reply(first) is None
    h.advance(1)  # +7000: the whole rebalance timeout
    assert h.reply(first) is not None and h.reply(first).error.name == "none"


def test_a_rebalance_timeout_no_longer_than_the_delay_leaves_nothing_to_extend() -> None:
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=3_000))
    first = h.join("g", version=3, rebalance=3_000)
    h.advance(1_000)
    h.join("g", version=3, rebalance=3_000)
    h.advance(2_000)
    assert h.reply(first) is not None and h.reply(first).error.name == "none"


def test_a_memberless_rebalance_completes_at_once_and_admits_the_pending_member() -> None:
    h = quiet()
    ids, _, generation = h.stable_group("g", 1)
    pending = h.call(h.join_cmd("g", client_id="p")).member_id
    h.leave("g", (ids[0], None))  # Preparing with no member, one id pending
    rt = h.join("g", pending, client_id="p")  # the same instant: admitted, the only member
    result = h.reply(rt)
    assert result is not None and result.error.name == "none"
    assert result.generation_id == generation + 1 and result.leader == pending


def test_the_last_member_leaving_with_an_id_pending_empties_the_group_at_once() -> None:
    h = quiet()
    ids, _, _ = h.stable_group("g", 1)
    h.call(h.join_cmd("g", client_id="p"))
    h.leave("g", (ids[0], None))
    h.advance(0)
    assert h.core.group("g").state == "Empty"  # type: ignore[union-attr]


def test_a_sync_answered_with_an_error_carries_no_protocol() -> None:
    h = quiet()
    ids, _, generation = h.stable_group("g", 2)
    a = h.join("g", ids[0], protocols=BOTH)
    b = h.join("g", ids[1], protocols=BOTH)
    gen = h.reply(a).generation_id
    follower = ids[1] if h.reply(a).leader == ids[0] else ids[0]
    parked = h.sync("g", follower, gen)
    assert h.reply(parked) is None and h.reply(b) is not None
    h.join("g", follower, protocols=(("range", subscription("audit")),))  # a new rebalance
    assert h.reply(parked) == SyncGroupResult(h.reply(parked).error)
    assert h.reply(parked).error.name == "rebalance_in_progress"
    assert generation + 1 == gen


def test_rebalance_completed_names_the_protocol_and_the_leader() -> None:
    h = quiet()
    _, leader, generation = h.stable_group("g", 2, protocols=(("roundrobin", b"x"),))
    done = h.events_of(RebalanceCompleted)
    assert [(e.generation_id, e.protocol_name, e.leader) for e in done] == [
        (generation, "roundrobin", leader)
    ]


def test_a_rejoin_exactly_the_label_window_after_a_deletion_is_topic_deleted() -> None:
    h = quiet()
    extra = TopicInfo("extra", uuid.UUID(int=60), 1)
    change(h, "extra", extra)
    with_extra = (("range", subscription("orders", "extra")),)
    ids, _, generation = h.stable_group("g", 1, protocols=with_extra)
    change(h, "extra", None)
    deleted_at = h.now
    while h.now < deleted_at + TOPIC_DELETED_LABEL_MS:
        h.advance(min(5_000, deleted_at + TOPIC_DELETED_LABEL_MS - h.now))
        h.heartbeat("g", ids[0], generation)
    h.events.clear()
    h.join("g", ids[0])  # the leader rejoins with the topic gone from its subscription
    assert [e.cause for e in h.events_of(RebalanceStarted)] == [RebalanceCause.TOPIC_DELETED]


def test_a_reloaded_group_without_a_protocol_type_writes_it_back_empty() -> None:
    h = quiet()
    core = load(h, GroupMetadataValue("", 0, None, None, 1_000, ()))
    record = core.group_record(core.state.groups["g"], h.now)
    assert record.value == GroupMetadataValue("", 0, None, None, 1_000, ())


def test_offsets_of_a_group_that_never_formed_a_generation_expire_from_their_commit() -> None:
    h = Harness(CoordinatorConfig(offsets_retention_ms=15_000,
                                  offsets_retention_check_interval_ms=10_000))  # fmt: skip
    h.call(h.join_cmd("g"))  # t=1 s: the group exists (Empty, an id pending, no protocol type)
    h.advance(9_000)
    h.commit("g", {("orders", 0): 5})  # t=10 s, before the first retention check (11 s)
    h.advance(11_000)  # the check at 21 s: 20 s after the group's creation, 11 s after the commit
    assert h.offset_of("g", "orders", 0) == 5
    h.advance(10_000)  # the check at 31 s: 21 s after the commit
    assert h.offset_of("g", "orders", 0) == -1


def test_a_sync_naming_a_protocol_in_the_first_rebalance_is_told_to_rejoin() -> None:
    h = Harness()
    first = h.call(h.join_cmd("g"))
    h.join("g", first.member_id)  # parked in the initial delay
    rt = h.sync("g", first.member_id, 0, protocol_type="consumer", protocol_name="range")
    assert h.reply(rt).error.name == "rebalance_in_progress"


def test_an_illegal_transition_names_the_group_and_both_states() -> None:
    with pytest.raises(IllegalStateTransition, match=r"^group 'g': Empty -> Stable$"):
        ClassicGroup("g", 0).transition_to(GroupState.STABLE, 0)


def test_the_configured_hash_function_hashes_the_groups() -> None:
    h = quiet(topic_hash="xxh3")
    h.stable_group("g", 1)
    orders = h.catalog.get("orders")
    assert orders is not None
    expected = group_hash({"orders": xxh3_64(topic_hash_bytes(orders))}, xxh3_64)
    assert h.core.state.groups["g"].metadata_hash == expected


def test_an_expiry_in_a_rebalance_does_not_complete_a_join_another_member_owes() -> None:
    h = quiet()
    ids, _, generation = h.stable_group("g", 3, session=10_000)
    a, b, c = ids
    rt_a = h.join("g", a, protocols=BOTH)  # a rebalance: b and c owe a JoinGroup
    h.advance(5_000)
    assert h.heartbeat("g", c, generation).error.name == "rebalance_in_progress"  # c is alive
    h.advance(5_000)  # b's session ends; c has not rejoined yet, but its session is renewed
    assert left(h) == [b] and h.reply(rt_a) is None
    rt_c = h.join("g", c, protocols=BOTH)
    assert h.reply(rt_a).generation_id == h.reply(rt_c).generation_id == generation + 1

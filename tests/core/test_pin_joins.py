"""JoinGroup's admission, member bookkeeping and member list, pinned where mutation testing found
them loose (issue 28, `make mutation`).

Each test drives the coordinator with real JoinGroups and fake-clock ticks: a full group (a loaded
group over `group.max.size`, Kafka's onLoaded) turns away a known member and a pending id; two
pending ids of KIP-394 are independent; a JoinGroup v4 is the first to get MEMBER_ID_REQUIRED; a
re-sent parked JoinGroup does not count twice; the leader's member list carries instance ids.
"""

from __future__ import annotations

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import LeaveReason, MemberJoined, MemberLeft
from coordinator.core.records import GroupMetadataKey, GroupMetadataValue
from tests.core.test_pin_loading import load, member, reloaded, value
from tests.support.fakeclock import EPOCH, Harness, subscription

ORDERS = (("range", subscription("orders")),)
BOTH = (("range", subscription("orders", "payments")),)


def test_a_full_group_turns_away_a_known_member_and_a_pending_id() -> None:
    h = Harness(CoordinatorConfig(max_group_size=2))
    h.core = load(h, value(*(member(f"m{i}", 30_000) for i in range(3)), leader="m0"))
    # Preparing with three members and nobody rejoined: a new member is still admitted (its id).
    first = h.call(h.join_cmd("g"))
    assert first.error.name == "member_id_required"
    pending_id = first.member_id
    assert h.core.group("g").pending_members == 1  # type: ignore[union-attr]
    h.join("g", "m0")
    h.join("g", "m1")  # two parked JoinGroups: the group is full
    # A known member that has not rejoined is removed (Kafka: "group is full").
    late = h.call(h.join_cmd("g", "m2"))
    assert late.error.name == "group_max_size_reached"
    left = h.events_of(MemberLeft)
    assert [(e.member_id, e.reason) for e in left] == [("m2", LeaveReason.MAX_SIZE)]
    snapshot = h.core.group("g")
    assert snapshot is not None and [m.member_id for m in snapshot.members] == ["m0", "m1"]
    # The pending id can never be admitted while the group is full: it is let go at once.
    refused = h.call(h.join_cmd("g", pending_id))
    assert refused.error.name == "group_max_size_reached"
    assert h.core.group("g").pending_members == 0  # type: ignore[union-attr]
    assert [e.member_id for e in h.events_of(MemberJoined)] == []


def test_two_pending_ids_are_admitted_one_after_the_other() -> None:
    h = Harness()
    a = h.call(h.join_cmd("g", client_id="a")).member_id
    b = h.call(h.join_cmd("g", client_id="b")).member_id
    h.join("g", a, client_id="a")
    assert h.core.group("g").pending_members == 1  # type: ignore[union-attr]
    h.join("g", b, client_id="b")  # b's id is still known
    snapshot = h.core.group("g")
    assert snapshot is not None and [m.member_id for m in snapshot.members] == [a, b]
    assert snapshot.pending_members == 0


def test_member_joined_names_the_member_and_its_client() -> None:
    h = Harness()
    rt = h.join("g", instance="i1", client_id="cid", host="/10.1.2.3")  # static: no id round
    h.advance(h.config.initial_rebalance_delay_ms)
    joined = h.events_of(MemberJoined)
    assert joined == [MemberJoined("g", h.reply(rt).member_id, "i1", "cid", "/10.1.2.3")]


def test_member_id_required_starts_at_join_group_v4() -> None:
    h = Harness()
    assert h.call(h.join_cmd("g", version=4)).error.name == "member_id_required"
    rt = h.join("v3", version=3)  # v3 and older: admitted under a new id at once
    h.advance(h.config.initial_rebalance_delay_ms)
    assert h.reply(rt).error.name == "none"


def test_a_resent_parked_join_does_not_count_twice() -> None:
    """Two members; one re-sends its parked JoinGroup: the join still waits for the other."""
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    ids, _, generation = h.stable_group("g", 2)
    a, b = ids
    first = h.join("g", a, protocols=BOTH)  # new metadata: a rebalance
    again = h.join("g", a, protocols=BOTH)
    assert h.reply(first).error.name == "rebalance_in_progress"  # the replaced one
    assert h.reply(again) is None  # parked: b has not rejoined yet
    rb = h.join("g", b)
    ra, rb_result = h.reply(again), h.reply(rb)
    assert ra.error.name == "none" and rb_result.error.name == "none"
    assert ra.generation_id == rb_result.generation_id == generation + 1
    assert sorted(m.member_id for m in ra.members + rb_result.members) == sorted(ids)


def test_a_new_member_completing_a_rebalance_is_answered_at_once() -> None:
    """The last member to arrive in a rebalance (not the initial one) is a new member: the join
    phase completes on its JoinGroup, without waiting for the rebalance timeout."""
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    ids, _, generation = h.stable_group("g", 1)
    pending = h.call(h.join_cmd("g", client_id="new")).member_id  # Stable: a pending id only
    parked = h.join("g", ids[0], protocols=BOTH)  # a rebalance, waiting for the pending id
    assert h.reply(parked) is None
    rt = h.join("g", pending, client_id="new")
    result = h.reply(rt)
    assert result is not None and result.error.name == "none"
    assert result.generation_id == generation + 1 == h.reply(parked).generation_id


def test_the_leaders_member_list_carries_instance_ids() -> None:
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    r1 = h.join("g", instance="i1", version=5)
    r2 = h.join("g", instance="i2", version=5)
    h.advance(1)
    leader = h.reply(r1)
    assert [(m.member_id, m.group_instance_id) for m in leader.members] == [
        (leader.member_id, "i1"),
        (h.reply(r2).member_id, "i2"),
    ]


def test_a_flag_from_an_earlier_rebalance_does_not_extend_a_later_initial_delay() -> None:
    """A new member joining a rebalance that is not the group's first does not mark the next
    initial rebalance (after the group emptied) as having new members."""
    delay = 3_000
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=delay))
    ids, _, _ = h.stable_group("g", 1)
    pending = h.call(h.join_cmd("g", client_id="b")).member_id
    h.join("g", ids[0], protocols=BOTH)  # Preparing, after Stable
    rb = h.join("g", pending, client_id="b")  # a new member in that rebalance
    result = h.reply(rb)
    h.leave("g", (ids[0], None), (result.member_id, None))
    assert h.core.group("g").state == "Empty"  # type: ignore[union-attr]
    rt = h.join("g", version=3)  # the initial rebalance again
    h.advance(delay)
    assert h.reply(rt) is not None and h.reply(rt).error.name == "none"


def test_a_new_groups_state_timestamp_is_its_creation_time() -> None:
    """Replay equals live: a group created by a JoinGroup that only got an id has the state
    timestamp its creation record says, not the time of a later record."""
    h = Harness()
    h.call(h.join_cmd("g"))  # MEMBER_ID_REQUIRED: the group exists, Empty
    created = [r.value for r in h.records if r.key == GroupMetadataKey("g")]
    assert len(created) == 1 and isinstance(created[0], GroupMetadataValue)
    assert created[0].current_state_timestamp_ms == EPOCH + h.now
    h.advance(60_000)
    live = h.core.group_record(h.core.state.groups["g"], h.now)
    assert live.value == reloaded(h).group_record(reloaded(h).state.groups["g"], h.now).value
    assert live.value.current_state_timestamp_ms == EPOCH + 1_000  # type: ignore[union-attr]

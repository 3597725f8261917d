"""JoinGroup (docs/protocol.md §4, §5): checks, admission, pending members, completion, initial
delay."""

from __future__ import annotations

import pytest

from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import JoinPhaseCompleted, RebalanceStarted
from coordinator.core.group import ClassicGroup, GroupState, IllegalStateTransition
from coordinator.core.messages import ErrorCode as E
from coordinator.core.records import GroupMetadataKey
from tests.support.fakeclock import Harness, subscription


@pytest.fixture
def h() -> Harness:
    return Harness()


# -- §5.1 checks before the group logic -------------------------------------------------------


def test_empty_group_id_is_invalid_group_id(h: Harness) -> None:
    r = h.call(h.join_cmd("", "m-1"))
    assert r.error is E.invalid_group_id and r.member_id == "m-1"


@pytest.mark.parametrize("session", [5_999, 1_800_001])
def test_session_timeout_out_of_bounds_is_invalid_session_timeout(h: Harness, session: int) -> None:
    r = h.call(h.join_cmd("g", "m-1", session=session))
    assert r.error is E.invalid_session_timeout and r.member_id == "m-1"
    assert h.core.group("g") is None


@pytest.mark.parametrize("session", [6_000, 1_800_000])
def test_session_timeout_bounds_are_inclusive(h: Harness, session: int) -> None:
    assert h.call(h.join_cmd("g", session=session)).error is E.member_id_required


def test_loading_answers_coordinator_load_in_progress_with_member_id(h: Harness) -> None:
    h.core.loading = True
    r = h.call(h.join_cmd("g", "m-1"))
    assert r.error is E.coordinator_load_in_progress and r.member_id == "m-1"


# -- §5.2 lookup and admission ----------------------------------------------------------------


def test_unknown_group_with_member_id_is_unknown_member_id(h: Harness) -> None:
    r = h.call(h.join_cmd("g", "ghost"))
    assert r.error is E.unknown_member_id and r.member_id == "ghost"
    assert h.core.group("g") is None


def test_group_created_by_join_writes_empty_group_metadata_record(h: Harness) -> None:
    h.call(h.join_cmd("g"))
    (record,) = h.records
    assert record.key == GroupMetadataKey("g")
    assert record.value is not None
    assert (record.value.protocol_type, record.value.generation_id, record.value.members) == (
        "",
        0,
        (),
    )
    assert record.value.leader is None and record.value.protocol_name is None


def test_group_max_size_rejects_new_member_in_stable() -> None:
    h = Harness(CoordinatorConfig(max_group_size=2))
    h.stable_group("g", 2)
    first = h.call(h.join_cmd("g"))  # v9: gets an id first
    r = h.call(h.join_cmd("g", first.member_id))
    assert r.error is E.group_max_size_reached and r.member_id == ""
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def test_group_max_size_in_preparing_counts_parked_joins() -> None:
    h = Harness(CoordinatorConfig(max_group_size=1))
    rt, _ = h.join_dynamic("g")
    r = h.call(h.join_cmd("g", version=3))  # v3: added at once, but the group is full
    assert r.error is E.group_max_size_reached
    assert h.reply(rt) is None
    h.advance(3_000)
    assert h.reply(rt).error is E.none


def test_group_max_size_existing_member_with_parked_join_is_admitted() -> None:
    h = Harness(CoordinatorConfig(max_group_size=1))
    rt, mid = h.join_dynamic("g")
    rt2 = h.join("g", mid)  # replaces its own parked join
    assert h.reply(rt).error is E.rebalance_in_progress
    h.advance(3_000)
    assert h.reply(rt2).error is E.none


# -- §5.3 new member --------------------------------------------------------------------------


def test_new_member_v4_dynamic_gets_member_id_required(h: Harness) -> None:
    r = h.call(h.join_cmd("g", client_id="app"))
    assert r.error is E.member_id_required
    assert r.member_id.startswith("app-")
    assert (r.generation_id, r.leader, r.members) == (-1, "", ())


def test_member_id_required_alone_does_not_change_state(h: Harness) -> None:
    h.call(h.join_cmd("g"))
    snap = h.core.group("g")
    assert snap is not None and snap.state == "Empty" and snap.pending_members == 1
    assert not h.events_of(RebalanceStarted)


def test_new_member_v3_is_added_at_once(h: Harness) -> None:
    rt = h.join("g", version=3)
    assert h.reply(rt) is None
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]


def test_static_member_never_gets_member_id_required(h: Harness) -> None:
    rt = h.join("g", instance="i1")
    assert h.reply(rt) is None
    h.advance(3_000)
    r = h.reply(rt)
    assert r.error is E.none and r.member_id.startswith("i1-")


def test_new_member_in_empty_group_needs_protocol_type(h: Harness) -> None:
    r = h.call(h.join_cmd("g", protocol_type=""))
    assert r.error is E.inconsistent_group_protocol and r.member_id == ""


def test_new_member_in_empty_group_needs_protocols(h: Harness) -> None:
    r = h.call(h.join_cmd("g", protocols=()))
    assert r.error is E.inconsistent_group_protocol


def test_new_member_with_other_protocol_type_is_inconsistent(h: Harness) -> None:
    h.stable_group("g", 1)
    r = h.call(h.join_cmd("g", protocol_type="connect"))
    assert r.error is E.inconsistent_group_protocol and r.member_id == ""


def test_new_member_with_no_common_protocol_is_inconsistent(h: Harness) -> None:
    h.stable_group("g", 1)
    r = h.call(h.join_cmd("g", protocols=(("sticky", b""),)))
    assert r.error is E.inconsistent_group_protocol


def test_pending_member_rejoin_adds_it_and_starts_rebalance(h: Harness) -> None:
    _rt, mid = h.join_dynamic("g")
    snap = h.core.group("g")
    assert snap is not None and snap.state == "PreparingRebalance" and snap.pending_members == 0
    assert [m.member_id for m in snap.members] == [mid]
    assert snap.leader_id == mid


def test_pending_member_with_instance_id_is_a_server_error(h: Harness) -> None:
    first = h.call(h.join_cmd("g"))
    r = h.call(h.join_cmd("g", first.member_id, instance="i1"))
    assert r.error is E.unknown_server_error


def test_pending_member_blocks_all_joined(h: Harness) -> None:
    _ids, leader, gen = h.stable_group("g", 1)
    rt_leader = h.join("g", leader)  # leader rejoin -> rebalance, all joined -> completes at once
    assert h.reply(rt_leader).generation_id == gen + 1
    pending = h.call(h.join_cmd("g"))  # a pending member appears in CompletingRebalance
    assert pending.error is E.member_id_required
    # a new rebalance: the leader rejoins with new metadata; the pending member blocks completion
    rt = h.join("g", leader, protocols=(("range", subscription("payments")),))
    assert h.reply(rt) is None
    h.advance(10_000)  # pending member's session timeout: removed -> join completes
    assert h.reply(rt).error is E.none


# -- §5.4 existing member ---------------------------------------------------------------------


def test_existing_unknown_member_is_unknown_member_id(h: Harness) -> None:
    h.stable_group("g", 1)
    r = h.call(h.join_cmd("g", "ghost"))
    assert r.error is E.unknown_member_id and r.member_id == "ghost"


def test_existing_member_wrong_instance_is_fenced(h: Harness) -> None:
    h.join("g", instance="i1")
    h.advance(3_000)
    r = h.call(h.join_cmd("g", "someone-else", instance="i1"))
    assert r.error is E.fenced_instance_id


def test_existing_member_unknown_instance_is_unknown_member_id(h: Harness) -> None:
    ids, _, _ = h.stable_group("g", 1)
    r = h.call(h.join_cmd("g", ids[0], instance="nope"))
    assert r.error is E.unknown_member_id


def test_existing_member_cannot_switch_to_new_protocol_alone(h: Harness) -> None:
    ids, _, _ = h.stable_group("g", 1)
    r = h.call(h.join_cmd("g", ids[0], protocols=(("sticky", b""),)))
    assert r.error is E.inconsistent_group_protocol and r.member_id == ids[0]


def test_follower_same_protocols_in_stable_gets_current_generation(h: Harness) -> None:
    ids, leader, gen = h.stable_group("g", 2)
    follower = ids[1]
    r = h.call(h.join_cmd("g", follower))
    assert (r.error, r.generation_id, r.leader, r.members, r.skip_assignment) == (
        E.none,
        gen,
        leader,
        (),
        False,
    )
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def test_follower_changed_protocols_in_stable_rebalances(h: Harness) -> None:
    ids, _, _ = h.stable_group("g", 2)
    rt = h.join("g", ids[1], protocols=(("range", subscription("payments")),))
    assert h.reply(rt) is None
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    assert h.events_of(RebalanceStarted)[-1].cause == "protocol_changed"


def test_leader_rejoin_in_stable_rebalances_even_unchanged(h: Harness) -> None:
    _ids, leader, _ = h.stable_group("g", 2)
    h.join("g", leader)
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    assert h.events_of(RebalanceStarted)[-1].cause == "leader_rejoined"


def test_same_protocols_in_completing_rebalance_returns_generation_and_leader_members(
    h: Harness,
) -> None:
    rt1, a = h.join_dynamic("g")
    _rt2, b = h.join_dynamic("g")
    h.advance(6_000)
    gen = h.reply(rt1).generation_id
    r_leader = h.call(h.join_cmd("g", a))
    assert r_leader.generation_id == gen and len(r_leader.members) == 2
    r_follower = h.call(h.join_cmd("g", b))
    assert r_follower.generation_id == gen and r_follower.members == ()
    assert h.core.group("g").state == "CompletingRebalance"  # type: ignore[union-attr]


def test_changed_protocols_in_completing_rebalance_rebalances(h: Harness) -> None:
    _rt1, a = h.join_dynamic("g")
    h.advance(3_000)
    rt = h.join("g", a, protocols=(("range", subscription("audit")),))
    # rebalanced, and with everyone joined it completed at once: a new generation
    assert h.reply(rt).generation_id == 2
    assert h.events_of(RebalanceStarted)[-1].cause == "protocol_changed"


def test_replaced_parked_join_is_answered_rebalance_in_progress(h: Harness) -> None:
    rt, mid = h.join_dynamic("g")
    rt2 = h.join("g", mid)
    assert h.reply(rt).error is E.rebalance_in_progress and h.reply(rt).member_id == mid
    h.advance(3_000)
    assert h.reply(rt2).error is E.none


# -- §5.5 join completion ---------------------------------------------------------------------


def test_initial_delay_holds_the_first_join(h: Harness) -> None:
    rt, _ = h.join_dynamic("g")
    h.advance(2_999)
    assert h.reply(rt) is None
    h.advance(1)
    assert h.reply(rt).error is E.none and h.reply(rt).generation_id == 1


def test_initial_delay_extends_while_new_members_arrive(h: Harness) -> None:
    rt1, _ = h.join_dynamic("g")
    h.advance(2_000)
    rt2, _ = h.join_dynamic("g")
    h.advance(1_000)  # first check at 3000: a member arrived -> another 3000
    assert h.reply(rt1) is None
    h.advance(2_999)
    assert h.reply(rt1) is None
    h.advance(1)
    assert h.reply(rt1).error is E.none and h.reply(rt2).error is E.none


def test_initial_delay_is_bounded_by_the_rebalance_timeout(h: Harness) -> None:
    # rebalance timeout 7000, delay 3000: remaining 4000 -> checks at 3000, 6000 and then 7000
    rts = [h.join_dynamic("g", rebalance=7_000)[0]]
    for _ in range(10):
        h.advance(1_000)
        rts.append(h.join_dynamic("g", rebalance=7_000)[0])
        if h.reply(rts[0]) is not None:
            break
    assert h.reply(rts[0]) is not None
    assert h.now - 1_000 <= 1_000 + 7_000


def test_initial_rebalance_does_not_complete_when_all_joined(h: Harness) -> None:
    rt, _ = h.join_dynamic("g")
    assert h.reply(rt) is None  # all joined, but the initial delay still applies


def test_non_initial_rebalance_completes_when_all_joined(h: Harness) -> None:
    ids, leader, gen = h.stable_group("g", 2)
    rt1 = h.join("g", leader)
    assert h.reply(rt1) is None
    rt2 = h.join("g", ids[1])
    assert h.reply(rt1).generation_id == gen + 1 and h.reply(rt2).generation_id == gen + 1


def test_only_the_leader_gets_members(h: Harness) -> None:
    rt1, a = h.join_dynamic("g", protocols=(("range", subscription("orders")),))
    rt2, b = h.join_dynamic("g", protocols=(("range", subscription("payments")),))
    h.advance(6_000)
    lead, follow = h.reply(rt1), h.reply(rt2)
    assert lead.leader == a and follow.leader == a
    assert [(m.member_id, m.metadata) for m in lead.members] == [
        (a, subscription("orders")),
        (b, subscription("payments")),
    ]
    assert follow.members == ()
    assert lead.protocol_type == "consumer" and lead.protocol_name == "range"


def test_rebalance_timeout_drops_dynamic_members_that_did_not_rejoin(h: Harness) -> None:
    ids, leader, gen = h.stable_group("g", 2, session=45_000)
    rt = h.join("g", ids[1])  # follower, same protocols: immediate
    assert h.reply(rt).generation_id == gen
    rt = h.join("g", leader)
    h.heartbeat("g", ids[1], gen)  # keep the follower's session alive, but it never rejoins
    h.advance(30_000)  # group rebalance timeout
    r = h.reply(rt)
    assert r.error is E.none and r.generation_id == gen + 1 and len(r.members) == 1
    snap = h.core.group("g")
    assert snap is not None and [m.member_id for m in snap.members] == [leader]


def test_leader_not_rejoined_is_replaced_by_a_joined_member(h: Harness) -> None:
    ids, leader, gen = h.stable_group("g", 2)
    follower = ids[1]
    rt = h.join("g", follower, protocols=(("range", subscription("payments")),))
    h.heartbeat("g", leader, gen)
    h.advance(30_000)
    r = h.reply(rt)
    assert r.leader == follower and len(r.members) == 1


def test_join_completion_with_no_members_goes_empty_and_writes_record(h: Harness) -> None:
    rt, mid = h.join_dynamic("g")
    h.leave("g", (mid, None))
    assert h.reply(rt).error is E.unknown_member_id
    h.advance(3_000)  # the initial-delay timer completes the join phase with nobody
    snap = h.core.group("g")
    assert snap is not None and snap.state == "Empty" and snap.generation_id == 1
    assert snap.protocol_type == "consumer" and snap.protocol_name is None
    value = h.records[-1].value
    assert value is not None and value.generation_id == 1 and value.members == ()
    assert value.protocol_type == "consumer" and value.leader is None  # type: ignore[union-attr]


def test_no_record_on_entering_preparing_or_completing(h: Harness) -> None:
    h.join_dynamic("g")
    n = len(h.records)
    h.advance(3_000)
    assert len(h.records) == n
    assert h.core.group("g").state == "CompletingRebalance"  # type: ignore[union-attr]


def test_join_phase_completed_event(h: Harness) -> None:
    h.join_dynamic("g")
    h.advance(3_000)
    (e,) = h.events_of(JoinPhaseCompleted)
    assert (e.generation_id, e.members, e.protocol_name) == (1, 1, "range")


# -- §4 the state table -----------------------------------------------------------------------


def test_illegal_transition_raises() -> None:
    group = ClassicGroup("g", 0)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.STABLE, 0)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.COMPLETING_REBALANCE, 0)


@pytest.mark.parametrize(
    ("source", "target", "ok"),
    [
        (GroupState.EMPTY, GroupState.PREPARING_REBALANCE, True),
        (GroupState.PREPARING_REBALANCE, GroupState.EMPTY, True),
        (GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE, True),
        (GroupState.COMPLETING_REBALANCE, GroupState.STABLE, True),
        (GroupState.COMPLETING_REBALANCE, GroupState.PREPARING_REBALANCE, True),
        (GroupState.STABLE, GroupState.PREPARING_REBALANCE, True),
        (GroupState.STABLE, GroupState.EMPTY, False),
        (GroupState.EMPTY, GroupState.STABLE, False),
        (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, False),
        (GroupState.STABLE, GroupState.DEAD, True),
    ],
)
def test_allowed_predecessors(source: GroupState, target: GroupState, ok: bool) -> None:
    assert source.may_move_to(target) is ok

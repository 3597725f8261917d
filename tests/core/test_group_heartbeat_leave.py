"""Heartbeat (docs/protocol.md §7), LeaveGroup (§8) and the session timer (§9)."""

from __future__ import annotations

import pytest

from coordinator.core.events import LeaveReason, MemberLeft, RebalanceStarted
from coordinator.core.messages import ErrorCode as E
from tests.support.fakeclock import Harness


@pytest.fixture
def h() -> Harness:
    return Harness()


# -- Heartbeat --------------------------------------------------------------------------------


def test_heartbeat_empty_group_id_is_invalid_group_id(h: Harness) -> None:
    assert h.heartbeat("", "m", 0).error is E.invalid_group_id


def test_heartbeat_while_loading_is_none(h: Harness) -> None:
    h.core.loading = True
    assert h.heartbeat("g", "m", 0).error is E.none


def test_heartbeat_unknown_group_is_unknown_member_id(h: Harness) -> None:
    assert h.heartbeat("g", "m", 0).error is E.unknown_member_id


def test_heartbeat_unknown_member_is_unknown_member_id(h: Harness) -> None:
    _, _, gen = h.stable_group()
    assert h.heartbeat("g", "ghost", gen).error is E.unknown_member_id


def test_heartbeat_pending_member_is_unknown_member_id(h: Harness) -> None:
    first = h.call(h.join_cmd("g"))
    assert h.heartbeat("g", first.member_id, 0).error is E.unknown_member_id


def test_heartbeat_unknown_instance_is_unknown_member_id(h: Harness) -> None:
    ids, _, gen = h.stable_group()
    assert h.heartbeat("g", ids[0], gen, "nope").error is E.unknown_member_id


def test_heartbeat_wrong_member_for_instance_is_fenced(h: Harness) -> None:
    rt = h.join("g", instance="i1")
    h.advance(3_000)
    assert h.heartbeat("g", "other", h.reply(rt).generation_id, "i1").error is (
        E.fenced_instance_id
    )


def test_heartbeat_wrong_generation_is_illegal_generation(h: Harness) -> None:
    ids, _, gen = h.stable_group()
    assert h.heartbeat("g", ids[0], gen - 1).error is E.illegal_generation


def test_heartbeat_in_preparing_rebalance_is_rebalance_in_progress(h: Harness) -> None:
    ids, leader, gen = h.stable_group()
    h.join("g", leader)
    assert h.heartbeat("g", ids[1], gen).error is E.rebalance_in_progress


def test_heartbeat_in_completing_rebalance_is_none(h: Harness) -> None:
    rt, mid = h.join_dynamic("g")
    h.advance(3_000)
    assert h.heartbeat("g", mid, h.reply(rt).generation_id).error is E.none


def test_heartbeat_in_stable_is_none(h: Harness) -> None:
    ids, _, gen = h.stable_group()
    assert h.heartbeat("g", ids[0], gen).error is E.none


def test_heartbeat_keeps_the_session_alive(h: Harness) -> None:
    ids, _, gen = h.stable_group("g", 1)
    for _ in range(10):
        h.advance(9_000)
        assert h.heartbeat("g", ids[0], gen).error is E.none
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def test_heartbeat_does_not_push_timer_entries(h: Harness) -> None:
    ids, _, gen = h.stable_group("g", 1)
    before = len(h.core.state.timers.heap)
    for _ in range(1_000):
        h.heartbeat("g", ids[0], gen)
    assert len(h.core.state.timers.heap) == before


def test_heartbeat_in_preparing_rebalance_resets_session(h: Harness) -> None:
    ids, leader, gen = h.stable_group("g", 2, session=10_000)
    rt = h.join("g", leader)
    for _ in range(2):
        h.advance(9_000)
        assert h.heartbeat("g", ids[1], gen).error is E.rebalance_in_progress
    assert ids[1] in [m.member_id for m in h.core.group("g").members]  # type: ignore[union-attr]
    assert h.reply(rt) is None


# -- session expiry ---------------------------------------------------------------------------


def test_session_expiry_in_stable_removes_and_rebalances(h: Harness) -> None:
    ids, leader, gen = h.stable_group("g", 2)
    for _ in range(2):
        h.heartbeat("g", leader, gen)
        h.advance(6_000)
    snap = h.core.group("g")
    assert snap is not None and [m.member_id for m in snap.members] == [leader]
    assert snap.state == "PreparingRebalance"
    left = h.events_of(MemberLeft)[-1]
    assert (left.member_id, left.reason) == (ids[1], LeaveReason.EXPIRED)
    assert h.events_of(RebalanceStarted)[-1].cause == "session_expired"


def test_session_expiry_of_last_member_goes_empty(h: Harness) -> None:
    _ids, _, gen = h.stable_group("g", 1)
    h.advance(10_000)
    snap = h.core.group("g")
    assert snap is not None and snap.state == "Empty" and snap.generation_id == gen + 1


def test_pending_member_expires_after_its_session_timeout(h: Harness) -> None:
    first = h.call(h.join_cmd("g", session=7_000))
    h.advance(6_999)
    assert h.core.group("g").pending_members == 1  # type: ignore[union-attr]
    h.advance(1)
    assert h.core.group("g").pending_members == 0  # type: ignore[union-attr]
    r = h.call(h.join_cmd("g", first.member_id))
    assert r.error is E.unknown_member_id


def test_new_member_uses_the_new_member_join_timeout(h: Harness) -> None:
    # Stable group whose leader keeps heartbeating; a new member's parked join is not protected
    _ids, _leader, _gen = h.stable_group("g", 1, session=400_000, rebalance=600_000)
    rt, _new = h.join_dynamic("g")
    h.advance(299_999)
    assert h.reply(rt) is None
    h.advance(1)
    r = h.reply(rt)
    assert r.error is E.unknown_member_id and r.member_id == ""


def test_member_with_parked_join_is_protected_until_answered(h: Harness) -> None:
    ids, leader, gen = h.stable_group("g", 2, session=6_000, rebalance=20_000)
    rt = h.join("g", leader)
    for _ in range(3):
        h.heartbeat("g", ids[1], gen)
        h.advance(5_000)
    # the leader's session (6 s) passed long ago, but its parked join protects it
    assert leader in [m.member_id for m in h.core.group("g").members]  # type: ignore[union-attr]
    h.advance(5_000)
    assert h.reply(rt) is not None and h.reply(rt).error is E.none


# -- LeaveGroup -------------------------------------------------------------------------------


def test_leave_empty_group_id_is_invalid_group_id(h: Harness) -> None:
    assert h.leave("", ("m", None)).error is E.invalid_group_id


def test_leave_while_loading(h: Harness) -> None:
    h.core.loading = True
    assert h.leave("g", ("m", None)).error is E.coordinator_load_in_progress


def test_leave_unknown_group_every_member_unknown(h: Harness) -> None:
    r = h.leave("g", ("a", None), ("b", "i"))
    assert r.error is E.none
    assert [m.error for m in r.members] == [E.unknown_member_id, E.unknown_member_id]


def test_leave_removes_member_and_rebalances(h: Harness) -> None:
    ids, _leader, _gen = h.stable_group("g", 2)
    r = h.leave("g", (ids[1], None))
    assert r.members[0].error is E.none
    assert h.events_of(RebalanceStarted)[-1].cause == "member_left"


def test_leave_of_last_member_goes_empty_with_record_at_once(h: Harness) -> None:
    ids, _, gen = h.stable_group("g", 1)
    h.leave("g", (ids[0], None))
    snap = h.core.group("g")
    assert snap is not None and snap.state == "Empty" and snap.generation_id == gen + 1
    assert h.last_effects.records and h.last_effects.records[-1].value.members == ()  # type: ignore[union-attr]


def test_leave_unknown_member_id(h: Harness) -> None:
    h.stable_group("g", 1)
    assert h.leave("g", ("ghost", None)).members[0].error is E.unknown_member_id


def test_leave_empty_member_id_without_instance_is_unknown(h: Harness) -> None:
    h.stable_group("g", 1)
    assert h.leave("g", ("", None)).members[0].error is E.unknown_member_id


def test_leave_static_member_by_instance_id_only(h: Harness) -> None:
    h.join("g", instance="i1")
    h.advance(3_000)
    r = h.leave("g", ("", "i1"))
    assert r.members[0].error is E.none
    assert h.core.group("g").members == ()  # type: ignore[union-attr]


def test_leave_static_member_wrong_member_id_is_fenced(h: Harness) -> None:
    h.join("g", instance="i1")
    h.advance(3_000)
    assert h.leave("g", ("other", "i1")).members[0].error is E.fenced_instance_id


def test_leave_pending_member(h: Harness) -> None:
    first = h.call(h.join_cmd("g"))
    r = h.leave("g", (first.member_id, None))
    assert r.members[0].error is E.none
    assert h.core.group("g").pending_members == 0  # type: ignore[union-attr]


def test_leave_answers_parked_join_with_unknown_member_id(h: Harness) -> None:
    _ids, leader, _gen = h.stable_group("g", 2)
    rt = h.join("g", leader)
    h.leave("g", (leader, None))
    r = h.reply(rt)
    assert r.error is E.unknown_member_id and r.member_id == ""


def test_leave_batch_mixed_results(h: Harness) -> None:
    ids, _, _ = h.stable_group("g", 2)
    r = h.leave("g", (ids[0], None), ("ghost", None), (ids[1], None))
    assert [m.error for m in r.members] == [E.none, E.unknown_member_id, E.none]
    assert h.core.group("g").state == "Empty"  # type: ignore[union-attr]


def test_leave_during_preparing_completes_join_when_rest_joined(h: Harness) -> None:
    ids, leader, gen = h.stable_group("g", 2)
    rt = h.join("g", leader)
    h.leave("g", (ids[1], None))
    assert h.reply(rt).generation_id == gen + 1


def test_leave_during_initial_rebalance_does_not_complete_join(h: Harness) -> None:
    rt1, _a = h.join_dynamic("g")
    _rt2, b = h.join_dynamic("g")
    h.leave("g", (b, None))
    assert h.reply(rt1) is None
    h.advance(6_000)
    assert h.reply(rt1).error is E.none

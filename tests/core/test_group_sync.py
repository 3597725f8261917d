"""SyncGroup (docs/protocol.md §6): checks in order, parking, the leader snapshot, pending-sync
timeout."""

from __future__ import annotations

import pytest

from coordinator.core.events import RebalanceCompleted, RebalanceStarted
from coordinator.core.messages import ErrorCode as E
from coordinator.core.records import GroupMetadataKey
from tests.support.fakeclock import Harness


@pytest.fixture
def h() -> Harness:
    return Harness()


def completing(h: Harness) -> tuple[str, str, int]:
    """Two members in CompletingRebalance -> (leader, follower, generation)."""
    rt1, a = h.join_dynamic("g")
    rt2, b = h.join_dynamic("g")
    h.advance(6_000)
    assert h.reply(rt1) is not None and h.reply(rt2) is not None
    return a, b, h.reply(rt1).generation_id


def test_empty_group_id_is_invalid_group_id(h: Harness) -> None:
    assert h.reply(h.sync("", "m", 0)).error is E.invalid_group_id


def test_loading_is_coordinator_load_in_progress(h: Harness) -> None:
    h.core.loading = True
    assert h.reply(h.sync("g", "m", 0)).error is E.coordinator_load_in_progress


def test_unknown_group_is_unknown_member_id(h: Harness) -> None:
    assert h.reply(h.sync("g", "m", 0)).error is E.unknown_member_id


def test_empty_group_is_unknown_member_id(h: Harness) -> None:
    h.commit("g", {("orders", 0): 1})
    assert h.reply(h.sync("g", "m", -1)).error is E.unknown_member_id


def test_unknown_member_is_unknown_member_id(h: Harness) -> None:
    _, _, gen = h.stable_group()
    assert h.reply(h.sync("g", "ghost", gen)).error is E.unknown_member_id


def test_wrong_instance_is_fenced(h: Harness) -> None:
    rt = h.join("g", instance="i1")
    h.advance(3_000)
    r = h.reply(rt)
    assert h.reply(h.sync("g", "other", r.generation_id, instance="i1")).error is (
        E.fenced_instance_id
    )


def test_wrong_generation_is_illegal_generation(h: Harness) -> None:
    ids, _, gen = h.stable_group()
    assert h.reply(h.sync("g", ids[0], gen + 1)).error is E.illegal_generation


def test_mismatched_protocol_type_is_inconsistent(h: Harness) -> None:
    ids, _, gen = h.stable_group()
    rt = h.sync("g", ids[0], gen, protocol_type="connect")
    assert h.reply(rt).error is E.inconsistent_group_protocol


def test_mismatched_protocol_name_is_inconsistent(h: Harness) -> None:
    ids, _, gen = h.stable_group()
    rt = h.sync("g", ids[0], gen, protocol_name="roundrobin")
    assert h.reply(rt).error is E.inconsistent_group_protocol


def test_null_protocol_fields_are_not_checked(h: Harness) -> None:
    ids, _, gen = h.stable_group()
    rt = h.sync("g", ids[0], gen, protocol_type=None, protocol_name=None, version=4)
    assert h.reply(rt).error is E.none


def test_generation_checked_before_protocol(h: Harness) -> None:
    ids, _, gen = h.stable_group()
    rt = h.sync("g", ids[0], gen + 5, protocol_name="other")
    assert h.reply(rt).error is E.illegal_generation


def test_preparing_rebalance_is_rebalance_in_progress(h: Harness) -> None:
    ids, leader, gen = h.stable_group()
    h.join("g", leader)
    assert h.reply(h.sync("g", ids[1], gen)).error is E.rebalance_in_progress


def test_follower_first_waits_for_leader(h: Harness) -> None:
    a, b, gen = completing(h)
    rt_b = h.sync("g", b, gen)
    assert h.reply(rt_b) is None
    rt_a = h.sync("g", a, gen, {a: b"A", b: b"B"})
    assert h.reply(rt_a).assignment == b"A"
    r = h.reply(rt_b)
    assert (r.error, r.assignment, r.protocol_type, r.protocol_name) == (
        E.none,
        b"B",
        "consumer",
        "range",
    )
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def test_leader_first_then_follower_answered_at_once(h: Harness) -> None:
    a, b, gen = completing(h)
    h.sync("g", a, gen, {a: b"A", b: b"B"})
    assert h.reply(h.sync("g", b, gen)).assignment == b"B"


def test_leader_sync_writes_snapshot_in_the_same_effects_as_replies(h: Harness) -> None:
    a, b, gen = completing(h)
    h.sync("g", a, gen, {a: b"A", b: b"B"})
    fx = h.last_effects
    (record,) = fx.records
    assert record.key == GroupMetadataKey("g")
    value = record.value
    assert value is not None
    assert value.generation_id == gen and value.leader == a  # type: ignore[union-attr]
    assert [(m.member_id, m.assignment) for m in value.members] == [  # type: ignore[union-attr]
        (a, b"A"),
        (b, b"B"),
    ]
    assert len(fx.replies) == 1
    assert h.events_of(RebalanceCompleted)[-1].generation_id == gen


def test_missing_assignment_is_empty_and_unknown_ids_ignored(h: Harness) -> None:
    a, b, gen = completing(h)
    h.sync("g", a, gen, {a: b"A", "stranger": b"X"})
    assert h.reply(h.sync("g", b, gen)).assignment == b""
    snap = h.core.group("g")
    assert snap is not None and {m.member_id for m in snap.members} == {a, b}


def test_follower_assignments_are_ignored(h: Harness) -> None:
    a, b, gen = completing(h)
    h.sync("g", b, gen, {a: b"evil", b: b"evil"})
    h.sync("g", a, gen, {a: b"A", b: b"B"})
    assert h.core.group("g").members[0].assignment == b"A"  # type: ignore[union-attr]


def test_repeated_leader_sync_in_stable_gets_stored_assignment(h: Harness) -> None:
    _ids, leader, gen = h.stable_group()
    r = h.reply(h.sync("g", leader, gen, {leader: b"ignored"}))
    assert r.assignment == f"assign-{leader}".encode()


def test_rebalance_answers_parked_syncs_with_rebalance_in_progress_and_resets_assignments(
    h: Harness,
) -> None:
    _a, b, gen = completing(h)
    rt_b = h.sync("g", b, gen)
    h.join("g", b, protocols=(("range", b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"),))
    assert h.reply(rt_b).error is E.rebalance_in_progress
    snap = h.core.group("g")
    assert snap is not None and all(m.assignment == b"" for m in snap.members)


def test_replaced_parked_sync_is_answered(h: Harness) -> None:
    a, b, gen = completing(h)
    rt1 = h.sync("g", b, gen)
    rt2 = h.sync("g", b, gen)
    assert h.reply(rt1).error is E.rebalance_in_progress
    h.sync("g", a, gen, {b: b"B"})
    assert h.reply(rt2).assignment == b"B"


def test_pending_sync_timeout_removes_members_that_never_synced(h: Harness) -> None:
    a, b, gen = completing(h)
    h.sync("g", a, gen, {a: b"A", b: b"B"})  # b never syncs, but heartbeats
    for _ in range(3):
        h.heartbeat("g", a, gen)
        h.heartbeat("g", b, gen)
        h.advance(9_000)
    h.heartbeat("g", a, gen)
    h.heartbeat("g", b, gen)
    h.advance(3_000)  # 30 000 since the join completed: the group rebalance timeout
    snap = h.core.group("g")
    assert snap is not None and [m.member_id for m in snap.members] == [a]
    assert h.events_of(RebalanceStarted)[-1].cause == "sync_expired"


def test_pending_sync_timeout_includes_the_leader(h: Harness) -> None:
    a, b, gen = completing(h)
    rt_b = h.sync("g", b, gen)
    for _ in range(3):
        h.heartbeat("g", b, gen)
        h.heartbeat("g", a, gen)
        h.advance(9_000)
    h.heartbeat("g", b, gen)
    h.advance(3_000)
    assert h.reply(rt_b).error is E.rebalance_in_progress
    snap = h.core.group("g")
    assert snap is not None and a not in [m.member_id for m in snap.members]


def test_all_synced_cancels_pending_sync_timer(h: Harness) -> None:
    ids, _leader, gen = h.stable_group()
    for _ in range(5):
        for m in ids:
            assert h.heartbeat("g", m, gen).error is E.none
        h.advance(9_000)
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def test_follower_whose_session_passed_while_its_sync_was_parked_expires_after_the_answer(
    h: Harness,
) -> None:
    """A parked SyncGroup protects its member past its session deadline; answering it must restart
    the session (Kafka's propagateAssignment -> completeAndScheduleNextHeartbeatExpiration), so a
    follower that then goes silent expires one session later and the group rebalances. Without
    the restart the ghost would keep its partitions for good."""
    a, b, gen = completing(h)
    session_ms = 10_000
    rt_b = h.sync("g", b, gen)  # parked until the leader's assignment
    for _ in range(3):  # the leader stays alive; b's own deadline passes while it is parked
        h.advance(4_000)
        assert h.heartbeat("g", a, gen).error is E.none
    assert h.reply(rt_b) is None
    assert b in {m.member_id for m in h.core.group("g").members}  # type: ignore[union-attr]
    h.sync("g", a, gen, {a: b"A", b: b"B"})
    assert h.reply(rt_b).assignment == b"B"
    answered = h.now
    # b is silent from here on; a keeps heartbeating well inside its own session.
    while h.now + 2_000 < answered + session_ms:
        h.advance(2_000)
        assert h.heartbeat("g", a, gen).error is E.none
    h.advance(answered + session_ms - 1 - h.now)
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]
    assert b in {m.member_id for m in h.core.group("g").members}  # type: ignore[union-attr]
    h.advance(1)  # exactly one session after the answer
    snap = h.core.group("g")
    assert snap is not None and [m.member_id for m in snap.members] == [a]
    started = h.events_of(RebalanceStarted)[-1]
    assert (started.cause, started.member_id) == ("session_expired", b)
    assert h.heartbeat("g", a, gen).error is E.rebalance_in_progress

"""The timer heap pinned where mutation testing found it loose (issue 28, `make mutation`).

`next_deadline_ms` names the next time something is due, never a timer that can no longer fire
(a deleted group's, a session entry of a group nobody is left in); a group that emptied and got
a new member arms that member's session; dead entries are purged exactly when the heap outgrows
its live entries by a quarter (coordinator/core/timers.py's invariants). Each test here fails on a
change to timers.py that the rest of the suite let through.
"""

from __future__ import annotations

import pytest

from coordinator.core import timers
from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.events import MemberLeft
from coordinator.core.messages import ErrorCode as E
from tests.support.fakeclock import Harness

RETENTION_CHECK_MS = 600_000


def harness() -> Harness:
    return Harness(
        CoordinatorConfig(
            initial_rebalance_delay_ms=0, offsets_retention_check_interval_ms=RETENTION_CHECK_MS
        )
    )


def test_a_deleted_groups_timers_are_not_the_next_deadline() -> None:
    """A stable member leaves, the group is deleted: its session entry (due in 10 s) and its
    old join and sync entries stay in the heap (lazy deletion), but the next deadline is the
    retention check, and passing all of them fires nothing."""
    h = harness()
    h.list_groups()  # arms the retention check at now + RETENTION_CHECK_MS
    retention_at = h.now + RETENTION_CHECK_MS
    ids, _, _ = h.stable_group("g", 1)
    h.leave("g", (ids[0], None))
    assert [r.error for r in h.delete_groups("g")] == [E.none]
    assert h.core.next_deadline_ms() == retention_at
    records = len(h.records)
    h.advance(60_000)
    assert h.core.group("g") is None
    assert len(h.records) == records
    assert h.core.next_deadline_ms() == retention_at


def test_a_deleted_groups_pending_sync_timer_is_not_the_next_deadline() -> None:
    """The group is deleted while its pending-sync timer is armed: that timer is dead."""
    h = harness()
    h.list_groups()
    retention_at = h.now + RETENTION_CHECK_MS
    rt, member = h.join_dynamic("g", session=10_000, rebalance=30_000)
    h.advance(0)
    assert h.reply(rt).error is E.none  # CompletingRebalance: the sync timer is armed
    h.leave("g", (member, None))
    assert [r.error for r in h.delete_groups("g")] == [E.none]
    assert h.core.next_deadline_ms() == retention_at


def test_the_session_entry_of_a_group_nobody_is_left_in_is_not_the_next_deadline() -> None:
    h = harness()
    h.list_groups()
    retention_at = h.now + RETENTION_CHECK_MS
    ids, _, _ = h.stable_group("g", 1)
    h.leave("g", (ids[0], None))
    assert h.core.group("g").state == "Empty"  # type: ignore[union-attr]
    assert h.core.next_deadline_ms() == retention_at


def test_a_group_that_emptied_arms_its_next_members_session() -> None:
    """A leaves; later B joins and goes silent: B's session expires on time (the group's
    session entry, dropped when nobody was left, is armed again for B)."""
    h = harness()
    ids, _, _ = h.stable_group("g", 1, session=10_000)
    h.leave("g", (ids[0], None))
    h.advance(20_000)  # A's old session deadline passes with nobody in the group
    (b,), _, _ = h.stable_group("g", 1, session=30_000)
    h.advance(29_999)
    assert [m.member_id for m in h.core.group("g").members] == [b]  # type: ignore[union-attr]
    h.advance(1)
    assert h.core.group("g").state == "Empty"  # type: ignore[union-attr]
    assert not h.core.group("g").members  # type: ignore[union-attr]


def test_dead_entries_are_purged_when_the_heap_outgrows_the_live_ones_by_a_quarter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With L live entries after a purge, the heap grows to L + L // 4 entries and the next
    push purges it back to the live ones: not sooner (a purge costs the whole heap) and not
    later (the heap would hold dead entries for minutes). Dead here: entries of a group that
    does not exist, and session entries that are not their group's newest."""
    monkeypatch.setattr(timers, "_PURGE_MIN_ENTRIES", 0)
    h = harness()
    core = h.core
    n = 0
    while True:
        h.stable_group(f"g{n}", 1)
        n += 1
        core.state.timers.purge()
        live = len(core.state.timers.heap)
        # L // 4 must differ from L / 4 and from L // 5, so that each wrong rule shows
        if live >= 9 and live % 4 and live // 4 != live // 5:
            break
    assert all(core.state.timers.may_fire(e) for e in core.state.timers.heap)
    far = h.now + 10**9
    lengths = []
    for i in range(live // 4 + 1):
        if i % 2:
            core.state.timers.push(far, timers.SESSION, "g0")  # not g0's session_timer_seq: dead
        else:
            core.state.timers.push(far, timers.JOIN, "no-such-group")
        lengths.append(len(core.state.timers.heap))
    assert lengths == [*range(live + 1, live + live // 4 + 1), live + 1]
    timers_ = core.state.timers
    assert sum(1 for e in timers_.heap if not timers_.may_fire(e)) == 1  # the entry just pushed


def test_timers_due_at_the_same_moment_fire_in_the_order_they_were_set() -> None:
    """Three groups whose members' sessions end at the same millisecond, armed 5 s apart (b
    first, a last), expire in the order their timers were armed, every run alike."""
    h = harness()
    end = h.now + 20_000
    for group in ("b", "c", "a"):
        rt = h.join(group, version=3, session=end - h.now)
        h.advance(0)  # the initial delay (0 ms) elapses: the join completes, the session starts
        assert h.reply(rt).error is E.none
        h.advance(5_000)
    before = len(h.events)
    h.advance(end - h.now)
    left = [e.group_id for e in h.events[before:] if isinstance(e, MemberLeft)]
    assert left == ["b", "c", "a"]

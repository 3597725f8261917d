"""The timer heap (docs/protocol.md §9): one session entry per group, lazy re-push, group
timers."""

from __future__ import annotations

import pytest

from coordinator.core import timers
from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.timers import SESSION
from tests.support.fakeclock import Harness


def live_session_entries(h: Harness, group: str) -> int:
    timers = h.core.state.timers
    return sum(1 for e in timers.heap if e[2] == SESSION and e[3] == group and timers.may_fire(e))


def test_fresh_core_has_no_deadline_until_first_command() -> None:
    h = Harness()
    assert h.core.next_deadline_ms() is None
    h.list_groups()
    assert h.core.next_deadline_ms() == h.now + h.config.offsets_retention_check_interval_ms


def test_one_live_session_entry_per_group_however_many_members_beat() -> None:
    h = Harness()
    ids, _, gen = h.stable_group("g", 3)
    h.stable_group("other", 2)
    for _ in range(50):
        for m in ids:
            h.heartbeat("g", m, gen)
            h.advance(300)
    assert live_session_entries(h, "g") == 1
    assert live_session_entries(h, "other") == 0  # silent: it expired and has nobody armed
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]


def join_stable(h: Harness, sessions: dict[str, int]) -> dict[str, str]:
    """Members (client id -> session timeout) joined into "g" and synced. -> client id -> id."""
    rts = {c: h.join_dynamic("g", client_id=c, session=ms) for c, ms in sessions.items()}
    for _ in range(20):  # the initial delay extends while members arrive (fake clock)
        if all(rt in h.replies for rt, _ in rts.values()):
            break
        h.advance(1_000)
    joined = {c: h.reply(rt) for c, (rt, _) in rts.items()}
    leader = next(iter(joined.values())).leader
    gen = next(iter(joined.values())).generation_id
    for _, mid in rts.values():
        h.sync("g", mid, gen, {m: b"a" for _, m in rts.values()} if mid == leader else None)
    return {c: mid for c, (_, mid) in rts.items()}


def member_ids(h: Harness) -> set[str]:
    group = h.core.group("g")
    return set() if group is None else {m.member_id for m in group.members}


def test_members_of_one_group_expire_each_at_their_own_deadline() -> None:
    h = Harness()
    ids = join_stable(h, {"short": 10_000, "long": 30_000})
    synced = h.now
    h.advance(synced + 9_999 - h.now)
    assert member_ids(h) == {ids["short"], ids["long"]}
    h.advance(1)
    assert member_ids(h) == {ids["long"]}
    h.advance(synced + 29_999 - h.now)
    assert member_ids(h) == {ids["long"]}
    h.advance(1)
    assert member_ids(h) == set()
    assert live_session_entries(h, "g") == 0


def test_a_deadline_before_the_groups_entry_arms_it_earlier() -> None:
    h = Harness()
    ids, _, gen = h.stable_group("g", 1, session=60_000)
    first = h.call(h.join_cmd("g", client_id="late", session=6_000))
    assert first.error.name == "member_id_required"  # a pending member, due in 6 s
    assert h.core.next_deadline_ms() == h.now + 6_000
    h.advance(5_999)
    assert first.member_id in h.core.state.groups["g"].pending_members
    h.advance(1)
    assert not h.core.state.groups["g"].pending_members
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]
    assert h.heartbeat("g", ids[0], gen).error.name == "none"


def test_early_entry_is_pushed_again_with_real_deadline() -> None:
    h = Harness()
    ids, _, gen = h.stable_group("g", 1)
    h.advance(5_000)
    h.heartbeat("g", ids[0], gen)  # real deadline now + 10 000
    deadline = h.now + 10_000
    assert h.core.next_deadline_ms() == deadline  # the stale earlier entry was re-pushed
    h.advance(9_999)
    assert h.core.group("g").state == "Stable"  # type: ignore[union-attr]
    h.advance(1)
    assert h.core.group("g").state == "Empty"  # type: ignore[union-attr]


def test_deleted_group_leaves_no_live_timers() -> None:
    h = Harness(CoordinatorConfig(offsets_retention_check_interval_ms=10**9))
    first = h.call(h.join_cmd("g"))
    assert first.member_id
    h.commit("x", {("orders", 0): 1})
    h.advance(10_000)  # pending member expires; nothing else is live but retention
    assert h.core.next_deadline_ms() == 1_000 + 10**9


def test_retention_check_repeats_every_interval() -> None:
    h = Harness(CoordinatorConfig(offsets_retention_check_interval_ms=1_000))
    h.list_groups()
    start = h.now
    h.advance(3_500)
    assert h.core.next_deadline_ms() == start + 4_000


def test_expire_fires_timers_due_at_exactly_now() -> None:
    h = Harness()
    rt, _ = h.join_dynamic("g")
    due = h.now + h.config.initial_rebalance_delay_ms
    assert h.core.next_deadline_ms() == due  # the initial delay is the earliest timer
    h.absorb(h.core.expire(due - 1))  # a millisecond early: nothing fires
    assert h.reply(rt) is None
    assert h.core.group("g").state == "PreparingRebalance"  # type: ignore[union-attr]
    assert h.core.next_deadline_ms() == due
    h.absorb(h.core.expire(due))  # exactly at the deadline: it fires
    joined = h.reply(rt)
    assert joined is not None and joined.error.name == "none", joined


def test_heap_is_purged_of_entries_that_cannot_fire() -> None:
    """Every join leaves dead entries behind (the pending member's session, the new-member join
    timeout, each generation's sync timer); purging keeps the heap near its live entries, and
    the timers that are live still fire after a purge."""
    h = Harness(CoordinatorConfig(initial_rebalance_delay_ms=0))
    groups = 400
    members: dict[str, tuple[list[str], int]] = {}
    for g in range(groups):
        ids, _, gen = h.stable_group(f"g{g}", 3)
        members[f"g{g}"] = (ids, gen)
    heap = h.core.state.timers.heap
    live = sum(1 for e in heap if h.core.state.timers.may_fire(e))
    assert live >= groups  # a session entry a group, at least
    assert len(heap) <= live + live // 4 + 1024 + 8 * groups  # not ~3 entries a member
    assert len(heap) < 2.5 * groups * 3
    # After purges: members that keep beating stay, the silent group's members expire on time.
    for _ in range(12):
        h.advance(1_000)
        for g, (ids, gen) in members.items():
            if g != "g0":
                for m in ids:
                    h.heartbeat(g, m, gen)
    assert h.core.group("g0").state == "Empty"  # type: ignore[union-attr]
    assert h.core.group("g1").state == "Stable"  # type: ignore[union-attr]


def test_a_purge_on_every_push_keeps_every_live_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry being pushed is live once its caller records its seq, after the push: a purge
    must never judge it. With a purge before every push, a whole group life still runs on time:
    the initial delay, sessions, the join phase's rebalance timeout, the pending-sync timeout."""
    monkeypatch.setattr(timers, "_PURGE_MIN_ENTRIES", 0)
    h = Harness()
    h.core.state.timers.purge_at = 0
    ids, _, gen = h.stable_group("g", 2, session=60_000)  # JOIN_INITIAL, SESSION entries
    a, _silent = ids
    rt_new, new = h.join_dynamic("g", client_id="late", session=60_000)  # a JOIN entry
    rt_a = h.join("g", a, session=60_000)
    h.advance(29_999)
    assert h.reply(rt_a) is None
    h.advance(1)  # the rebalance timeout: the join completes without the silent member
    for rt in (rt_a, rt_new):
        joined = h.reply(rt)
        assert joined is not None and joined.error.name == "none", joined
        assert joined.generation_id == gen + 1
    assert {m.member_id for m in h.core.group("g").members} == {a, new}  # type: ignore[union-attr]
    h.advance(30_000)  # nobody synced: the SYNC entry fires and drops them
    assert h.core.group("g").state in ("PreparingRebalance", "Empty")  # type: ignore[union-attr]
    assert not h.core.group("g").members  # type: ignore[union-attr]

"""The target assignment's pace (group.consumer.assignment.interval.ms, KIP-1263): joins inside
one interval are folded into one assignor run, made by the timer at the interval's end or by the
first heartbeat after it; a quiet group is assigned at once."""

from __future__ import annotations

import itertools

from coordinator.core.consumer import ConsumerGroupConfig
from coordinator.core.consumer.model import ConsumerGroupState
from coordinator.core.consumer.records import ConsumerGroupTargetAssignmentMetadataKey
from coordinator.core.consumer.target import AssignmentPacer
from tests.core.test_consumer_support import Harness, snapshot

INTERVAL_MS = 1_000


def runs(h: Harness) -> int:
    """Assignor runs so far: one target-assignment epoch record each."""
    return sum(isinstance(r.key, ConsumerGroupTargetAssignmentMetadataKey) for r in h.records)


def paced() -> Harness:
    return Harness(config=ConsumerGroupConfig(assignment_interval_ms=INTERVAL_MS))


def test_joins_inside_an_interval_are_folded_into_one_run_made_by_the_timer() -> None:
    h = paced()
    first = h.client("a")
    assert h.poll(first).member_epoch == 2  # a quiet group: assigned at once
    assert runs(h) == 1
    for name in ("b", "c", "d"):
        h.poll(h.client(name))
    assert (h.group.group_epoch, h.group.assignment_epoch) == (5, 2)
    assert h.group.state is ConsumerGroupState.ASSIGNING
    assert runs(h) == 1
    # After a run over one member, the next waits only for a pause in the joins (a fifth of the
    # interval), not for the interval's end: nothing to amortise.
    assert h.core.next_deadline_ms() == h.clock.now + INTERVAL_MS // 5
    h.advance(INTERVAL_MS // 5)  # the timer: one run for the three joins
    assert runs(h) == 2
    assert h.group.assignment_epoch == 5
    h.check_invariants()
    h.settle()
    assert h.group.state is ConsumerGroupState.STABLE
    sizes = [len(c.owned_set()) for c in h.clients.values()]
    assert sum(sizes) == 6 and max(sizes) - min(sizes) <= 1
    assert runs(h) == 2
    assert snapshot(h.replayed()["g"]) == snapshot(h.group)


def test_a_heartbeat_after_the_interval_runs_the_assignor_before_the_timer() -> None:
    h = paced()
    h.poll(h.client("a"))
    h.poll(h.client("b"))
    assert runs(h) == 1
    h.clock.now += INTERVAL_MS  # no expire(): the next heartbeat finds the interval over
    h.poll(h.clients["b"])
    assert runs(h) == 2
    assert h.group.assignment_epoch == h.group.group_epoch == 3
    h.advance(INTERVAL_MS)  # the timer was cancelled by that run: nothing more
    assert runs(h) == 2


def test_a_member_leaving_inside_the_interval_is_assigned_with_the_next_run() -> None:
    h = paced()
    for name in ("a", "b", "c"):
        h.client(name)
    h.settle()  # rounds of 1 s: every join ends up assigned
    assert h.group.state is ConsumerGroupState.STABLE
    before = runs(h)
    h.leave(h.clients["c"])
    h.poll(h.clients["a"])  # inside the interval of the last run? only if one ran just now
    h.settle()
    assert runs(h) == before + 1
    assert sorted(len(c.owned_set()) for c in h.clients.values()) == [3, 3]
    h.check_invariants()


def test_without_an_interval_every_bump_is_assigned_at_once() -> None:
    h = Harness(config=ConsumerGroupConfig(assignment_interval_ms=0))
    for name in ("a", "b", "c"):
        h.poll(h.client(name))
    assert runs(h) == 3
    assert h.group.assignment_epoch == h.group.group_epoch == 4


def test_a_due_run_waits_while_joins_keep_coming_then_assigns_the_storm_at_once() -> None:
    h = paced()
    quiet = INTERVAL_MS // 5
    h.poll(h.client("a"))  # a quiet group: assigned at once
    assert runs(h) == 1
    # Joins every quiet/2 ms for 1.5 intervals: past the interval's end, none quiet long enough.
    for i in range(30):
        h.advance(quiet // 2)
        h.poll(h.client(f"m{i:02d}"))
        assert runs(h) == 1, f"a run while joins kept coming, at join {i}"
    assert h.group.state is ConsumerGroupState.ASSIGNING
    h.advance(quiet - 1)
    assert runs(h) == 1
    h.advance(1)  # the joins paused for `quiet`: one run for all 30 of them
    assert runs(h) == 2
    assert h.group.assignment_epoch == h.group.group_epoch
    h.settle()
    assert h.group.state is ConsumerGroupState.STABLE
    sizes = [len(c.owned_set()) for c in h.clients.values()]
    assert sum(sizes) == 6 and max(sizes) - min(sizes) <= 1
    assert runs(h) == 2


def test_a_group_that_never_stops_changing_is_still_assigned_five_intervals_after_a_bump() -> None:
    h = paced()
    quiet = INTERVAL_MS // 5
    h.poll(h.client("a"))
    first = h.clock.now + quiet // 2  # the first bump the next run folds
    seen = []
    for i in range(120):  # joins every quiet/2 ms, 12 intervals long
        h.advance(quiet // 2)
        h.poll(h.client(f"m{i:03d}"))
        seen.append((h.clock.now, runs(h)))
    ran_at = [t for (_, before), (t, n) in itertools.pairwise(seen) if n > before]
    assert ran_at[0] == first + 5 * INTERVAL_MS
    assert all(b - a >= INTERVAL_MS for a, b in itertools.pairwise(ran_at))
    assert len(ran_at) >= 2


def test_after_a_run_over_several_members_joins_wait_for_the_intervals_end() -> None:
    h = paced()
    h.poll(h.client("a"))  # at once: one member
    h.poll(h.client("b"))
    h.advance(INTERVAL_MS // 5)  # the pause: a run over a and b
    assert runs(h) == 2
    ran_at = h.clock.now
    h.clock.now += 10
    h.poll(h.client("c"))
    assert h.core.next_deadline_ms() == ran_at + INTERVAL_MS  # not the pause's end
    h.advance(ran_at + INTERVAL_MS - 1 - h.clock.now)
    assert runs(h) == 2
    h.advance(1)
    assert runs(h) == 3
    assert h.group.assignment_epoch == h.group.group_epoch


def test_after_a_lone_run_the_pause_is_bounded_by_the_longest_wait() -> None:
    pacer = AssignmentPacer(100)  # quiet 20 ms, longest wait 500 ms
    assert pacer.due_at("g", 2, 0) is None  # never assigned: at once
    pacer.assigned("g", 0, members=1)
    assert pacer.due_at("g", 3, 10) == 30  # inside the interval: a pause of 20 ms
    assert pacer.due_at("g", 4, 25) == 45  # each bump pushes it on...
    for t in range(35, 520, 10):
        pacer.due_at("g", t, t)
    assert pacer.due_at("g", 999, 505) == 510  # ...but not past the first bump + 500 ms
    assert pacer.due_at("g", 999, 510) is None
    pacer.assigned("g", 510, members=2)
    assert pacer.due_at("g", 1000, 515) == 610  # a run over two: the interval's end
    pacer.forget("g")
    assert pacer.due_at("g", 1001, 520) is None

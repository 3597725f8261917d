"""The target assignment's pace after a run over several members (coordinator.core.consumer.target,
AssignmentPacer.due_at), pinned where `make mutation` found it loose once a run over one member
got its own rule (only a pause in the joins): after a run over several, a bump inside the
interval waits for the interval's end and then for the joins to pause (a fifth of the interval),
and a group whose joins never pause is still assigned five intervals after the first bump the run
folds. Fake clock, a real stream of joins."""

from __future__ import annotations

import itertools

from tests.core.test_consumer_pacing import INTERVAL_MS, paced, runs
from tests.core.test_consumer_support import Harness

QUIET_MS = INTERVAL_MS // 5


def after_a_run_over_two() -> tuple[Harness, int]:
    """a is assigned at once; b, inside the interval, with the run the pause after it makes:
    the group's last run was over two members. Returns the harness and when that run was."""
    h = paced()
    h.poll(h.client("a"))
    h.poll(h.client("b"))
    h.advance(QUIET_MS)
    assert runs(h) == 2 and len(h.group.members) == 2
    return h, h.clock.now


def test_after_a_run_over_several_members_a_due_run_waits_for_the_joins_to_pause() -> None:
    h, ran_at = after_a_run_over_two()
    # Joins every quiet/2 ms until half an interval past the interval's end: none paused.
    while h.clock.now < ran_at + INTERVAL_MS + INTERVAL_MS // 2:
        h.advance(QUIET_MS // 2)
        h.poll(h.client(f"m{h.clock.now}"))
        assert runs(h) == 2, f"a run while the joins kept coming, at {h.clock.now - ran_at} ms"
    last_join = h.clock.now
    h.advance(QUIET_MS - 1)
    assert runs(h) == 2
    h.advance(1)  # the joins paused for a fifth of the interval: one run for all of them
    assert runs(h) == 3
    assert h.clock.now == last_join + QUIET_MS
    assert h.group.assignment_epoch == h.group.group_epoch


def test_after_a_run_over_several_members_endless_joins_are_assigned_five_intervals_on() -> None:
    h, ran_at = after_a_run_over_two()
    first = ran_at + QUIET_MS // 2  # the first bump the next run folds
    seen = []
    for _ in range(70):  # joins every quiet/2 ms, 7 intervals long: never a pause
        h.advance(QUIET_MS // 2)
        h.poll(h.client(f"m{h.clock.now}"))
        seen.append((h.clock.now, runs(h)))
    ran = [t for (_, before), (t, n) in itertools.pairwise(seen) if n > before]
    assert ran == [first + 5 * INTERVAL_MS]

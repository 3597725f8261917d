"""The target assignment's pace (group.consumer.assignment.interval.ms, KIP-1263): joins inside
one interval are folded into one assignor run, made by the timer at the interval's end or by the
first heartbeat after it; a quiet group is assigned at once."""

from __future__ import annotations

from coordinator.core.consumer import ConsumerGroupConfig
from coordinator.core.consumer.model import ConsumerGroupState
from coordinator.core.consumer.records import ConsumerGroupTargetAssignmentMetadataKey
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
    assert h.core.next_deadline_ms() == h.clock.now + INTERVAL_MS
    h.advance(INTERVAL_MS)  # the timer: one run for the three joins
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

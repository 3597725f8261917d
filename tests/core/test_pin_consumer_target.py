"""The target assignment's computation (coordinator.core.consumer.target: Kafka's
TargetAssignmentBuilder and the assignor's input), pinned where `make mutation` found it loose:
a run writes a target record only for the members whose target changed, and its event says how
many; the time of the last run reaches the rebalance's RebalanceSettled; the assignor is given
the group's subscription type (a homogeneous group gets the homogeneous builder's contiguous
blocks) and each member's instance id (the range assignor orders static members first)."""

from __future__ import annotations

from coordinator.core.consumer import ConsumerGroupConfig
from coordinator.core.consumer.messages import RebalanceSettled, TargetAssignmentComputed
from coordinator.core.consumer.records import ConsumerGroupTargetAssignmentMemberKey
from tests.core.test_consumer_support import Harness, topic_id

ORDERS = topic_id(0)


def targets_written(h: Harness, since: int) -> list[str]:
    return [r.key.member_id for r in h.records[since:]
            if isinstance(r.key, ConsumerGroupTargetAssignmentMemberKey)]  # fmt: skip


def runs(h: Harness) -> list[TargetAssignmentComputed]:
    return [e for e in h.events if isinstance(e, TargetAssignmentComputed)]


def test_a_run_writes_only_the_targets_that_changed_and_counts_them() -> None:
    h = Harness()
    h.client("a")
    h.client("b")
    h.settle()
    before = len(h.records)
    h.events.clear()
    h.poll(h.client("c", topics=("payments",)))  # a's and b's targets stay as they are
    assert targets_written(h, before) == ["c"]
    epoch = h.group.group_epoch
    assert runs(h) == [TargetAssignmentComputed("g", epoch, "uniform", 3, 1)]
    h.settle()
    before = len(h.records)
    h.events.clear()
    h.poll(h.client("d"))  # orders is shared by three now: a, b and d change, c does not
    assert sorted(targets_written(h, before)) == ["a", "b", "d"]
    assert runs(h) == [TargetAssignmentComputed("g", h.group.group_epoch, "uniform", 4, 3)]


def test_the_rebalance_settled_says_when_its_last_run_was() -> None:
    h = Harness(config=ConsumerGroupConfig(assignment_interval_ms=1_000))
    h.poll(h.client("a"))  # assigned at once
    ran_at = h.clock.now
    h.clock.now += 100
    started = h.clock.now
    h.events.clear()
    h.poll(h.client("b"))  # inside the interval, after a run over one member: for a pause
    h.advance(200)
    assert len(runs(h)) == 1
    h.settle()
    (settled,) = [e for e in h.events if isinstance(e, RebalanceSettled)]
    assert (settled.started_ms, settled.assigned_ms) == (started, started + 200)
    assert started + 200 < ran_at + 1_000


def test_a_homogeneous_group_gets_the_homogeneous_builders_blocks() -> None:
    h = Harness(config=ConsumerGroupConfig(assignment_interval_ms=1_000))
    h.poll(h.client("a"))  # a has all six partitions
    h.poll(h.client("b"))
    h.poll(h.client("c"))
    h.advance(1_000)  # one run for b and c: a keeps its first two, b and c take blocks
    targets = {mid: sorted(t[ORDERS]) for mid, t in h.group.target_assignment.items()}
    assert targets == {"a": [0, 1], "b": [2, 3], "c": [4, 5]}


def test_the_range_assignor_puts_static_members_first() -> None:
    h = Harness()
    h.client("m-dynamic", assignor="range")
    h.client("z-static", instance_id="i-1", assignor="range")
    h.settle()
    targets = {mid: sorted(t[ORDERS]) for mid, t in h.group.target_assignment.items()}
    assert targets == {"z-static": [0, 1, 2], "m-dynamic": [3, 4, 5]}


def test_a_run_made_by_a_heartbeat_cancels_the_runs_timer() -> None:
    """The run the timer waited for was made by a heartbeat after the interval: the timer no
    longer wakes the coordinator (only the members' session timeouts are left)."""
    h = Harness(config=ConsumerGroupConfig(assignment_interval_ms=1_000))
    h.poll(h.client("a"))
    h.poll(h.client("b"))  # inside the interval: a timer for its end
    h.clock.now += 1_000  # no expire(): b's next heartbeat finds the interval over
    h.poll(h.clients["b"])
    assert h.group.assignment_epoch == h.group.group_epoch
    session = h.config.session_timeout_ms
    a_beat = h.clock.now - 1_000
    assert h.core.next_deadline_ms() == a_beat + session  # a's session: nothing earlier

"""The target assignment of a consumer group: when it is computed, and its assignor's input.

Kafka's TargetAssignmentBuilder runs the group's assignor over every member whenever the group
epoch is ahead of the assignment epoch. Run on every bump, forming a group of N members costs
N assignor runs over up to N members (N^2); Kafka 4.3 (KIP-1263) amortises it with
`group.consumer.assignment.interval.ms`: a group's target is computed at most once per
interval, and the bumps in between are folded into the next run. `AssignmentPacer` keeps that
pace per group: the first bump after a quiet interval is assigned at once (in the heartbeat
that bumped), the later ones when the interval is over, by a timer (the coordinator's `expire`),
or by the first heartbeat after it. Members keep reconciling toward the last target meanwhile.

A join storm (hundreds of members joining at once, each a bump) outlasts the interval: assigned
at every interval's end, each run would hand the members joined so far a target that the next
run takes apart again (every earlier member revokes, every run writes a target record per
member), and at 5,000 members the runs took most of the server's CPU while the joins arrived.
So a run that is due waits while bumps keep coming: until none came for a fifth of the
interval (`quiet_ms`), and at most five intervals after the first bump it folds
(`max_wait_ms`), so a group that never stops changing is still assigned. A lone bump in a quiet
group is still assigned at once. Kafka (KIP-1263) has only the interval, 1 s by default; ours
is 100 ms so that a member joining a stable group is assigned quickly.

A run over one member (a group's first member, assigned at once) costs nothing to amortise, and
holding the next run to the interval's end made a forming group wait on it: the first member,
handed every partition, learnt it must give them up only on a heartbeat after that end (its
acknowledgement came before it, behind the other joins), and every other member waited a
round more for them (1,000 members forming in 0.30 s instead of 0.20 s, `make bench`). After
such a run, bumps inside the interval wait only for a pause (`quiet_ms`, at most
`max_wait_ms`); the first bump after a quiet interval is still assigned at once.

`build_spec` turns the group into the assignor's `GroupSpec`. Members with the same subscription
(names and regex) share one resolved topic-id set, so a homogeneous group of N members over T
topics resolves T names once, not N*T times.

Soft state: the last run's time is not persisted; a loaded group is assigned at once.
Pure: time is an argument.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from coordinator.core.consumer.assignors import ASSIGNORS, GroupSpec, MemberSpec
from coordinator.core.consumer.messages import ConsumerGroupConfig, TargetAssignmentComputed
from coordinator.core.consumer.model import EMPTY_PARTITIONS, ConsumerGroup
from coordinator.core.consumer.op import Op
from coordinator.core.consumer.rebalances import Rebalances
from coordinator.core.consumer.record_helpers import target_record
from coordinator.core.consumer.records import (
    ConsumerGroupRecord,
    ConsumerGroupTargetAssignmentMetadataKey,
    ConsumerGroupTargetAssignmentMetadataValue,
)
from coordinator.core.consumer.timers import MemberTimers, TimerKind
from coordinator.core.topics import TopicCatalog

__all__ = ["AssignmentPacer", "build_spec", "maybe_update_target", "update_target_assignment"]


class AssignmentPacer:
    """Per group, when its target assignment was last computed (the interval's start), and the
    bumps not assigned yet: when the first and the latest were seen."""

    __slots__ = ("_epoch", "_first_ms", "_last_ms", "_latest_ms", "_lone", "interval_ms")

    def __init__(self, interval_ms: int) -> None:
        self.interval_ms = interval_ms
        self._last_ms: dict[str, int] = {}
        self._lone: set[str] = set()  # the groups whose last run was over one member
        self._epoch: dict[str, int] = {}  # the group epoch last seen ahead of its target
        self._first_ms: dict[str, int] = {}  # the first bump not assigned yet
        self._latest_ms: dict[str, int] = {}  # the latest bump not assigned yet

    @property
    def quiet_ms(self) -> int:
        """A due run waits until no bump came for this long."""
        return self.interval_ms // 5

    @property
    def max_wait_ms(self) -> int:
        """...but not longer than this after the first bump it folds."""
        return 5 * self.interval_ms

    def due_at(self, group_id: str, group_epoch: int, now_ms: int) -> int | None:
        """None: assign now; else the time from which the group may be assigned. `group_epoch`
        is the group's (ahead of its assignment): a new value is a bump seen at `now_ms`."""
        if self._epoch.get(group_id) != group_epoch:
            self._epoch[group_id] = group_epoch
            self._latest_ms[group_id] = now_ms
            self._first_ms.setdefault(group_id, now_ms)
        last = self._last_ms.get(group_id)
        if self.interval_ms <= 0 or last is None:
            return None
        first = self._first_ms[group_id]
        interval_end = last + self.interval_ms
        if first == now_ms and now_ms >= interval_end:
            return None  # the first bump after a quiet interval: at once
        if group_id in self._lone:  # nothing to amortise: only a pause in the bumps
            due = min(self._latest_ms[group_id] + self.quiet_ms, first + self.max_wait_ms)
            return None if now_ms >= due else due
        due = max(interval_end, self._latest_ms[group_id] + self.quiet_ms)
        due = max(interval_end, min(due, first + self.max_wait_ms))
        return None if now_ms >= due else due

    def assigned(self, group_id: str, now_ms: int, members: int = 2) -> None:
        self._last_ms[group_id] = now_ms
        if members <= 1:
            self._lone.add(group_id)
        else:
            self._lone.discard(group_id)
        self._first_ms.pop(group_id, None)
        self._latest_ms.pop(group_id, None)

    def forget(self, group_id: str) -> None:
        for times in (self._last_ms, self._epoch, self._first_ms, self._latest_ms):
            times.pop(group_id, None)
        self._lone.discard(group_id)


class _Coordinator(Protocol):
    """What the target's computation reads of the ConsumerGroupCoordinator."""

    @property
    def config(self) -> ConsumerGroupConfig: ...
    @property
    def catalog(self) -> TopicCatalog: ...
    @property
    def timers(self) -> MemberTimers: ...
    @property
    def rebalances(self) -> Rebalances: ...
    @property
    def pacer(self) -> AssignmentPacer: ...


def build_spec(group: ConsumerGroup, catalog: TopicCatalog) -> GroupSpec:
    """The assignor's input: every member's subscribed topic ids (existing topics only: Kafka's
    TopicIds leaves unknown names out) and current target, and the subscribed topics' sizes."""
    counts: dict[uuid.UUID, int] = {}
    resolved: dict[tuple[frozenset[str], str | None], frozenset[uuid.UUID]] = {}
    specs: dict[str, MemberSpec] = {}
    target = group.target_assignment
    for mid in sorted(group.members):
        m = group.members[mid]
        key = (m.subscribed_topic_names, m.subscribed_topic_regex)
        ids = resolved.get(key)
        if ids is None:
            found = set()
            for name in group.member_topics(m):
                info = catalog.get(name)
                if info is not None:
                    found.add(info.topic_id)
                    counts[info.topic_id] = info.partitions
            ids = resolved[key] = frozenset(found)
        specs[mid] = MemberSpec(
            mid, m.instance_id, m.rack_id, ids, target.get(mid, EMPTY_PARTITIONS)
        )
    return GroupSpec(specs, group.subscription_type(), counts)


def maybe_update_target(coord: _Coordinator, op: Op, group: ConsumerGroup) -> None:
    """Compute the target when the group epoch is ahead of it, at most once per assignment
    interval (coordinator.core.consumer.target): a bump inside the interval is folded into
    the run its timer (or the first heartbeat after it) makes."""
    gid = group.group_id
    if group.group_epoch <= group.assignment_epoch or not group.members:
        return
    due_ms = coord.pacer.due_at(gid, group.group_epoch, op.now_ms)
    if due_ms is not None:
        # A timer already set fires at or before `due_ms` (the due time only moves later):
        # it finds the run not due yet and sets itself again.
        if not coord.timers.scheduled(TimerKind.ASSIGNMENT, gid, ""):
            coord.timers.schedule(TimerKind.ASSIGNMENT, gid, "", due_ms)
        return
    coord.timers.cancel(TimerKind.ASSIGNMENT, gid, "")
    update_target_assignment(coord, op, group, group.group_epoch)
    coord.pacer.assigned(gid, op.now_ms, len(group.members))


def update_target_assignment(
    coord: _Coordinator, op: Op, group: ConsumerGroup, group_epoch: int
) -> None:
    """Kafka's TargetAssignmentBuilder: run the group's assignor over every member, write
    the members whose target changed, then the new assignment epoch."""
    gid = group.group_id
    assignor_name = group.preferred_server_assignor(coord.config.assignors)
    spec = build_spec(group, coord.catalog)
    result = ASSIGNORS[assignor_name].assign(spec)
    changed = 0
    target = group.target_assignment
    for mid in spec.members:
        new = result.get(mid, EMPTY_PARTITIONS)
        old = target.get(mid)
        if old is None or new != old:
            changed += 1
            op.emit(target_record(gid, mid, new))
    op.emit(
        ConsumerGroupRecord(
            ConsumerGroupTargetAssignmentMetadataKey(gid),
            ConsumerGroupTargetAssignmentMetadataValue(group_epoch),
        )
    )
    op.events.append(
        TargetAssignmentComputed(gid, group_epoch, assignor_name, len(spec.members), changed)
    )
    coord.rebalances.assigned(gid, op.now_ms)

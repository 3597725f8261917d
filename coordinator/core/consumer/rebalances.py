"""A consumer group's rebalances as events (issue 23 item 7): what metrics, the status page, the
history log and the audit see of KIP-848 groups.

A rebalance of a consumer group starts with a group epoch bump (a member joined, left, expired or
changed its subscription; a subscribed topic's metadata changed) and is over when every member
is reconciled to the target assignment (the group is Stable) or no member is left. Bumps during
a rebalance continue it (the audit counts them as restarts), as a classic rebalance re-triggered
before it completed. `Rebalances` keeps, per group, when the rebalance under way started and the
last bump (its cause and trigger), and emits MemberAdded, GroupEpochBumped, MemberReconciled and
RebalanceSettled into the caller's event list.

Soft state: never written, never read back. A restart rebuilds it from the loaded groups: a
group caught mid-rebalance (neither Stable nor Empty) is tracked again from the load, so its end
is still one RebalanceSettled; what started it is not in the log, so that rebalance reads as
started at the load by a metadata change of its topics (the records carry no bump time or
cause: they are Kafka's, byte for byte). Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from coordinator.core.consumer.messages import (
    ConsumerEvent,
    GroupEpochBumped,
    MemberAdded,
    MemberReconciled,
    RebalanceSettled,
)
from coordinator.core.consumer.model import ConsumerGroup, ConsumerGroupMember, ConsumerGroupState

if TYPE_CHECKING:
    from collections.abc import Mapping

    class _Op(Protocol):
        """What `settle` reads of the coordinator's call (coordinator._Op)."""

        @property
        def groups(self) -> Mapping[str, ConsumerGroup]: ...
        @property
        def events(self) -> list[ConsumerEvent]: ...
        @property
        def now_ms(self) -> int: ...


__all__ = ["Rebalances", "removal_cause"]

# MemberRemoved.reason -> the RebalanceCause (coordinator.core.events) of the epoch bump it makes.
_REMOVAL_CAUSES = {
    "left": "member_left",
    "session_expired": "session_expired",
    "rebalance_timeout": "rebalance_timeout",
}


def removal_cause(reason: str) -> str:
    return _REMOVAL_CAUSES.get(reason, "member_left")


class _Rebalance:
    __slots__ = ("assigned_ms", "bump", "started_ms")

    def __init__(self, started_ms: int, bump: GroupEpochBumped) -> None:
        self.started_ms = started_ms
        self.assigned_ms = started_ms  # when the last target assignment was computed
        self.bump = bump


class Rebalances:
    """The rebalances under way, one per group at most."""

    __slots__ = ("_changed_topics", "_under_way")

    def __init__(self) -> None:
        self._under_way: dict[str, _Rebalance] = {}
        # Topics whose change a group has not rehashed yet: the trigger of its next bump.
        self._changed_topics: dict[str, set[str]] = {}

    def topic_changed(self, group_id: str, name: str) -> None:
        self._changed_topics.setdefault(group_id, set()).add(name)

    def forget(self, group_id: str) -> None:
        self._under_way.pop(group_id, None)
        self._changed_topics.pop(group_id, None)

    def member_added(
        self, events: list[ConsumerEvent], group_id: str, m: ConsumerGroupMember
    ) -> None:
        events.append(MemberAdded(group_id, m.member_id, m.instance_id, m.client_id,
                                  m.client_host))  # fmt: skip

    def bumped(
        self,
        events: list[ConsumerEvent],
        now_ms: int,
        group: ConsumerGroup,
        epoch: int,
        metadata_hash: int,
        cause: str,
        m: ConsumerGroupMember | None,
    ) -> None:
        """An epoch bump whose trigger is member `m`; with no cause, a subscribed topic's
        metadata changed (after a restart, which one is unknown: all of them)."""
        gid = group.group_id
        changed = self._changed_topics.pop(gid, set())
        if cause and m is not None:
            event = GroupEpochBumped(gid, epoch, metadata_hash, cause, m.member_id,
                                     m.instance_id, m.client_id, m.client_host)  # fmt: skip
        else:
            topics = tuple(sorted(changed or group.subscribed_topic_names()))
            event = GroupEpochBumped(gid, epoch, metadata_hash, "metadata_changed", topics=topics)
        events.append(event)
        rebalance = self._under_way.get(gid)
        if rebalance is None:
            self._under_way[gid] = _Rebalance(now_ms, event)
        else:
            rebalance.bump = event

    def resumed(self, now_ms: int, group: ConsumerGroup) -> None:
        """After loading: track again a rebalance the restart interrupted (module docstring)."""
        gid = group.group_id
        if gid in self._under_way or group.state in (
            ConsumerGroupState.STABLE,
            ConsumerGroupState.EMPTY,
        ):
            return
        topics = tuple(sorted(group.subscribed_topic_names()))
        bump = GroupEpochBumped(gid, group.group_epoch, group.metadata_hash, topics=topics)
        self._under_way[gid] = _Rebalance(now_ms, bump)

    def assigned(self, group_id: str, now_ms: int) -> None:
        rebalance = self._under_way.get(group_id)
        if rebalance is not None:
            rebalance.assigned_ms = now_ms

    def reconciled(
        self,
        events: list[ConsumerEvent],
        now_ms: int,
        group: ConsumerGroup,
        before: ConsumerGroupMember,
        after: ConsumerGroupMember,
    ) -> None:
        """MemberReconciled when a heartbeat brought the member to its target."""
        rebalance = self._under_way.get(group.group_id)
        epoch = group.assignment_epoch
        if rebalance is None or before.is_reconciled_to(epoch) or not after.is_reconciled_to(epoch):
            return
        events.append(MemberReconciled(group.group_id, after.member_id, after.member_epoch,
                                       now_ms - rebalance.started_ms))  # fmt: skip

    def settle(self, op: _Op, group_id: str, assignors: tuple[str, ...]) -> None:
        """RebalanceSettled once the group's rebalance under way is over."""
        rebalance = self._under_way.get(group_id)
        if rebalance is None:
            return
        group = op.groups.get(group_id)
        if group is not None and group.state not in (
            ConsumerGroupState.STABLE,
            ConsumerGroupState.EMPTY,
        ):
            return
        del self._under_way[group_id]
        if group is None:
            return
        assignor = group.preferred_server_assignor(assignors)
        op.events.append(
            RebalanceSettled(group_id, group.group_epoch, assignor, len(group.members),
                             rebalance.started_ms, rebalance.assigned_ms, op.now_ms,
                             rebalance.bump)
        )  # fmt: skip

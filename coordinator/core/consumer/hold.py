"""Which ConsumerGroupHeartbeats the shell may hold back for a while (`holdable`), for how long
(`hold_deadline_ms`), and which records end a hold (`woken_groups`).

A member waiting on others -- its target names partitions other members have not released yet
(UNRELEASED_PARTITIONS), or its group's next target is paced (coordinator.core.consumer.target)
-- learns of the change only on its next heartbeat, up to one heartbeat interval after it
happened (5 s by default in Kafka). The shell (coordinator.serve.beat_hold) processes such a
beat, when it carries nothing new, not at once but as soon as the group changed (`woken_groups`)
or at its deadline: the answer is then the one a beat arriving at that moment would
get, indistinguishable from network delay, and it hands the released partitions over one round
earlier. Kafka answers at once; we differ on purpose (docs/compatibility.md).

A beat is holdable only if processing it now would change nothing and answer nothing new:
- a plain beat of a known consumer-protocol member at its current epoch (not a join, leave, or
  a member another beat fenced), with no subscription or configuration change and its owned
  partitions null or exactly what the coordinator has it holding;
- the member waits (STABLE or UNRELEASED_PARTITIONS, at the assignment epoch or before it):
  its target revokes nothing and every partition it adds is still held by another member --
  processed now, the beat would hand it a new epoch at most, and the partitions a beat after
  their release -- or it has its whole target and its group's next one waits for the pacer's
  timer.

The deadline is half the heartbeat interval after its arrival: librdkafka (2.16) times a
ConsumerGroupHeartbeat out after one interval and drops a late answer
(coordinator.core.consumer.member_update), and the session timeout, refreshed when the beat is
processed, is far longer (a beat arriving close to its member's session deadline is not held).

A join's answer may wait too (`follow_up`). A member joining a group whose target is paced, or
whose target partitions others still hold, is answered "no partitions yet" and would ask again
a heartbeat interval later: in a group forming at once (a deployment's pods starting together),
every member's first partitions came a round after its join. Instead the shell holds the
answer and, once the member no longer waits, processes the plain beat the member would send
next (`follow_up`: its new epoch, owning nothing) and answers the join with that beat's answer,
the assignment always in it, as a join's answer has. The member sees a join answered late with
its first partitions. Such a hold lasts up to the pacer's longest wait (five assignment
intervals), or half a heartbeat interval if that is longer. A first join waits for its answer
up to the client's request timeout (librdkafka: the session timeout; Java: 30 s). A librdkafka
member that *rejoins* times its join out after one heartbeat interval; that interval is longer
than the hold unless the assignment interval is over a fifth of it (the defaults: 100 ms
against 5 s), and a join it sends again releases the held one at once (answers stay in order).
Capping the hold below one interval was measured (before the pacing after a one-member run,
coordinator.core.consumer.target): with the bench's 100 ms heartbeats, joins then expired
before the group's second target half the time (1,000 forming in 0.39-0.79 s against 0.20-0.29
s uncapped).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.core.consumer.coordinator import ConsumerGroupCoordinator
from coordinator.core.consumer.member_update import updated_member
from coordinator.core.consumer.messages import ConsumerGroupHeartbeat, HeartbeatResponse
from coordinator.core.consumer.model import (
    EMPTY_PARTITIONS,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    PartitionMap,
)
from coordinator.core.consumer.records import (
    ConsumerGroupCurrentMemberAssignmentKey,
    ConsumerGroupTargetAssignmentMetadataKey,
    TopicPartitions,
)
from coordinator.core.consumer.timers import TimerKind
from coordinator.core.messages import ErrorCode

__all__ = ["follow_up", "hold_deadline_ms", "holdable", "woken_groups"]

_PLAIN = (MemberState.STABLE, MemberState.UNRELEASED_PARTITIONS)

# The records after which a held beat may get something new: a member's current assignment
# (a release, a fenced member's tombstone) and a new target assignment epoch.
_WAKING = (ConsumerGroupCurrentMemberAssignmentKey, ConsumerGroupTargetAssignmentMetadataKey)


def follow_up(
    req: ConsumerGroupHeartbeat, answer: HeartbeatResponse
) -> ConsumerGroupHeartbeat | None:
    """The plain beat a member whose join (`req`) got `answer` sends next, if the answer gave
    it no partitions (else None: answer the join now). It owns nothing and changes nothing."""
    if (
        req.member_epoch != 0
        or answer.error is not ErrorCode.none
        or answer.member_epoch <= 0
        or answer.member_id is None
        or any(tp.partitions for tp in answer.assignment or ())
    ):
        return None
    return ConsumerGroupHeartbeat(
        group_id=req.group_id,
        member_id=answer.member_id,
        member_epoch=answer.member_epoch,
        topic_partitions=(),
        client_id=req.client_id,
        client_host=req.client_host,
        api_version=req.api_version,
    )


def hold_deadline_ms(
    coord: ConsumerGroupCoordinator, req: ConsumerGroupHeartbeat, now_ms: int, join: bool = False
) -> int | None:
    """When `req`, arrived at `now_ms`, is processed at the latest if it is held; None: it is
    not holdable, process it now. Never near the member's session deadline: a beat that
    arrived in time must not be fenced because it was held (a client silent for most of its
    session timeout). `join`: `req` is a join's `follow_up`, held longer."""
    hold = coord.config.heartbeat_interval_ms // 2
    if join:
        hold = max(hold, coord.pacer.max_wait_ms)
    if hold <= 0 or not holdable(coord, req, now_ms + hold):
        return None
    session = coord.timers.deadline_of(TimerKind.SESSION, req.group_id, req.member_id)
    if session is None or session - now_ms <= 2 * hold:
        return None
    return now_ms + hold


def holdable(
    coord: ConsumerGroupCoordinator, req: ConsumerGroupHeartbeat, until_ms: int | None = None
) -> bool:
    """Whether `req`, processed now, would only tell a waiting member "nothing yet". `until_ms`:
    the deadline it would be held to; a member waiting only for its group's paced target is held
    only if the target is due by then (a beat held to its deadline for nothing answers half an
    interval late, and its member's next beat comes that much later)."""
    if req.member_epoch <= 0:  # a join (0) or a leave (-1, -2)
        return False
    group = coord.groups.get(req.group_id)
    if group is None:
        return False
    member = group.members.get(req.member_id)
    if member is None or member.member_epoch != req.member_epoch or member.classic is not None:
        return False
    if not _waiting(coord, group, member, until_ms):  # first: most beats are steady ones
        return False
    if updated_member(member, req) is not member:  # a subscription or configuration change
        return False
    owned = req.topic_partitions
    return owned is None or _same(owned, member.assigned_partitions)


def _waiting(
    coord: ConsumerGroupCoordinator,
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    until_ms: int | None,
) -> bool:
    """Processing the member's beat now would revoke nothing and hand it nothing: every
    partition its target adds is held by another member (there is at least one), or it has
    its target and the group's next one is paced."""
    if member.state not in _PLAIN or member.member_epoch > group.assignment_epoch:
        return False
    paced = False
    if group.group_epoch > group.assignment_epoch:
        due_ms = coord.timers.deadline_of(TimerKind.ASSIGNMENT, group.group_id, "")
        paced = due_ms is not None and (until_ms is None or due_ms <= until_ms)
    if member.state is MemberState.STABLE and member.member_epoch == group.assignment_epoch:
        return paced  # it has its target (the steady beat: answered at once unless paced)
    target = group.target_assignment.get(member.member_id, EMPTY_PARTITIONS)
    assigned = member.assigned_partitions
    unreleased = False
    for topic_id in assigned:
        if not assigned[topic_id] <= target.get(topic_id, frozenset()):
            return False  # a revocation to tell
    for topic_id, wanted in target.items():
        have = assigned.get(topic_id)
        for p in wanted if have is None else wanted - have:
            if group.current_partition_epoch(topic_id, p) == -1:
                return False  # free: its beat picks it up
            unreleased = True
    return unreleased or paced


def _same(owned: tuple[TopicPartitions, ...], assigned: PartitionMap) -> bool:
    n = 0
    for tp in owned:
        if not tp.partitions:
            continue
        have = assigned.get(tp.topic_id)
        if have is None or len(have) != len(tp.partitions) or not have.issuperset(tp.partitions):
            return False
        n += 1
    return n == sum(1 for ps in assigned.values() if ps)


def woken_groups(keys: Iterable[object]) -> set[str]:
    """The consumer groups whose held beats to look at again after records with these keys."""
    return {k.group_id for k in keys if isinstance(k, _WAKING)}

"""The group timers: one heap of (deadline_ms, seq, kind, group_id), lazy deletion.

`TimerHeap` is part of the core's state (`core.state.CoreState.timers`); `core.expiry` pops what
is due and runs it.

Invariants:
- An entry is live only while its seq equals the owner's `*_timer_seq` (`retention_seq` for the
  one RETENTION entry).
- Sessions: a member (or pending member) keeps only its `deadline_ms` (0 = not armed); its group
  owns one SESSION entry, due no later than the earliest armed deadline. A heartbeat moves a
  deadline later and pushes nothing unless it lands before the group's entry. A session entry
  popped before the earliest deadline is pushed again at it; one that is due expires every
  member whose deadline has passed. One entry a group instead of one a member: a member costs
  ~140 bytes less (the entry tuple and its seq), and a group is rescanned only when its entry
  pops, about once a session timeout.
- Dead entries are purged once the heap outgrows its live entries by a quarter, before a push
  (never judging the entry being pushed, whose seq its caller records after the push).
"""

from __future__ import annotations

import heapq

from coordinator.core.group import ClassicGroup, Member, PendingMember

# Heap entry kinds.
SESSION = 0  # the group's members' and pending members' sessions (heartbeat timers)
JOIN = 1  # join phase: the group rebalance timeout
JOIN_INITIAL = 2  # join phase: the initial rebalance delay (group.initial.rebalance.delay.ms)
SYNC = 3  # pending sync: members that got a JoinGroup reply but never sent SyncGroup
RETENTION = 4  # offsets retention check
_PURGE_MIN_ENTRIES = 1024  # below this the timer heap is never purged

TimerEntry = tuple[int, int, int, str]


def earliest_session(group: ClassicGroup) -> int:
    """The earliest armed session deadline of the group's members and pending members; 0 = none."""
    earliest = 0
    for owners in (group.members, group.pending_members):
        for owner in owners.values():
            deadline = owner.deadline_ms
            # `<=` for `<` is an equivalent mutant: on a tie either deadline is the same value.
            if deadline and (not earliest or deadline < earliest):  # pragma: no mutate
                earliest = deadline
    return earliest


class TimerHeap:
    """The timer heap and its owners' bookkeeping; `groups` is the core state's table."""

    __slots__ = ("_groups", "_seq", "heap", "purge_at", "retention_seq")

    def __init__(self, groups: dict[str, ClassicGroup]) -> None:
        self._groups = groups
        self.heap: list[TimerEntry] = []
        self.purge_at = _PURGE_MIN_ENTRIES  # heap size that triggers `purge`
        # Starting at 1 is an equivalent mutant: seqs are only compared with each other, and 0
        # ("not armed") is issued from no positive start, since a push adds before issuing.
        self._seq = 0  # pragma: no mutate
        self.retention_seq = 0  # the live RETENTION entry's; 0 = not armed

    def push(self, deadline_ms: int, kind: int, group_id: str) -> int:
        heap = self.heap
        if len(heap) >= self.purge_at:
            # Before the push: the caller records the new entry's seq only after this returns,
            # so until then the entry would look dead.
            self.purge()
        # `+= 2` is an equivalent mutant (seqs stay unique and increasing); a decreasing seq is
        # not, and tests/core/test_pin_timers.py pins the same-deadline firing order it breaks.
        self._seq += 1  # pragma: no mutate
        heapq.heappush(heap, (deadline_ms, self._seq, kind, group_id))
        return self._seq

    def purge(self) -> None:
        """Drop the entries that can no longer fire. Deletion is lazy, so rebalances leave
        entries behind (each generation's join and sync timers, a session entry re-armed
        earlier) that would stay until their deadlines, minutes away. Purging whenever the heap
        outgrows the live entries by a quarter keeps it near one entry a timer, at an amortized
        O(1) a push. In place: `core.expiry` holds the list."""
        heap = self.heap
        heap[:] = [e for e in heap if self.may_fire(e)]
        heapq.heapify(heap)
        self.purge_at = max(_PURGE_MIN_ENTRIES, len(heap) + len(heap) // 4)

    def may_fire(self, entry: TimerEntry) -> bool:
        """`is_live` without its side effect (re-pushing a session entry that fired early): for
        a session entry, it is its group's newest."""
        if entry[2] == SESSION:
            group = self._groups.get(entry[3])
            return group is not None and entry[1] == group.session_timer_seq
        return self.is_live(entry)

    def schedule_session(
        self, group: ClassicGroup, member: Member | PendingMember, timeout_ms: int, now_ms: int
    ) -> None:
        deadline = now_ms + timeout_ms
        member.deadline_ms = deadline
        if group.session_timer_seq == 0 or deadline < group.session_timer_at:
            self.arm_sessions(group, deadline)

    def arm_sessions(self, group: ClassicGroup, deadline_ms: int) -> None:
        group.session_timer_seq = self.push(deadline_ms, SESSION, group.group_id)
        group.session_timer_at = deadline_ms

    def schedule_join(self, group: ClassicGroup, delay_ms: int, now_ms: int, kind: int) -> None:
        group.join_timer_seq = self.push(now_ms + delay_ms, kind, group.group_id)

    def schedule_sync(self, group: ClassicGroup, now_ms: int) -> None:
        group.sync_timer_generation = group.generation_id
        group.sync_timer_seq = self.push(
            now_ms + group.rebalance_timeout_ms(), SYNC, group.group_id
        )

    def arm_retention(self, deadline_ms: int) -> None:
        self.retention_seq = self.push(deadline_ms, RETENTION, "")

    def is_live(self, entry: TimerEntry) -> bool:
        """Drop dead entries; push early session entries again at the earliest real deadline."""
        kind = entry[2]
        if kind == SESSION:
            group = self._groups.get(entry[3])
            if group is None or entry[1] != group.session_timer_seq:
                return False
            earliest = earliest_session(group)
            if earliest == 0:
                group.session_timer_seq = 0
                return False
            if earliest > entry[0]:
                self.arm_sessions(group, earliest)
                return False
            return True
        if kind == RETENTION:
            return entry[1] == self.retention_seq
        group = self._groups.get(entry[3])
        if group is None:
            return False
        if kind == SYNC:
            return entry[1] == group.sync_timer_seq
        return entry[1] == group.join_timer_seq

    def next_deadline_ms(self) -> int | None:
        heap = self.heap
        while heap:
            entry = heapq.heappop(heap)
            if self.is_live(entry):
                heapq.heappush(heap, entry)
                return entry[0]
        return None

    def earliest_ms(self) -> int | None:
        """The top of the heap, possibly a stale entry: O(1), for a cheap re-arm check."""
        heap = self.heap
        return heap[0][0] if heap else None

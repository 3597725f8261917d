"""The group timers: one heap of (deadline_ms, seq, kind, group_id, member_id), lazy deletion.

`GroupTimers` is the base of `coordinator.joins.GroupMachine`, which fires what is due (`_fire`).

Invariants:
- An entry is live only while its seq equals the owner's `*_timer_seq`. Each member (and pending
  member) owns at most one live entry; a heartbeat only moves `deadline_ms` later and never pushes
  unless the member has no live entry or the deadline moves earlier. An entry popped before its
  owner's deadline is pushed again with the real deadline.
- Dead entries are purged once the heap outgrows its live entries by a quarter, before a push
  (never judging the entry being pushed, whose seq its caller records after the push).
"""

from __future__ import annotations

import heapq

from coordinator.group import ClassicGroup, Member, PendingMember

# Heap entry kinds.
SESSION = 0  # a member's or pending member's session (heartbeat) timer
JOIN = 1  # join phase: the group rebalance timeout
JOIN_INITIAL = 2  # join phase: the initial rebalance delay (group.initial.rebalance.delay.ms)
SYNC = 3  # pending sync: members that got a JoinGroup reply but never sent SyncGroup
RETENTION = 4  # offsets retention check
_PURGE_MIN_ENTRIES = 1024  # below this the timer heap is never purged

TimerEntry = tuple[int, int, int, str, str]


class GroupTimers:
    """The timer heap and its owners' bookkeeping; `_groups` is the machine's."""

    _groups: dict[str, ClassicGroup]
    _retention_seq: int

    def __init__(self) -> None:
        self._heap: list[TimerEntry] = []
        self._purge_at = _PURGE_MIN_ENTRIES  # heap size that triggers `_purge_timers`
        self._seq = 0

    def _push(self, deadline_ms: int, kind: int, group_id: str, member_id: str = "") -> int:
        heap = self._heap
        if len(heap) >= self._purge_at:
            # Before the push: the caller records the new entry's seq only after this returns,
            # so until then the entry would look dead.
            self._purge_timers()
        self._seq += 1
        heapq.heappush(heap, (deadline_ms, self._seq, kind, group_id, member_id))
        return self._seq

    def _purge_timers(self) -> None:
        """Drop the entries that can no longer fire. Deletion is lazy, so every rebalance leaves
        entries behind (a pending member's session, the new-member join timeout) that would stay
        until their deadlines, minutes away: 2-3 entries a member after a join storm, ~150 bytes
        each. Purging whenever the heap outgrows the live entries by a quarter keeps it near one
        entry a timer, at an amortized O(1) a push. In place: `expire` holds the list."""
        heap = self._heap
        heap[:] = [e for e in heap if self._may_fire(e)]
        heapq.heapify(heap)
        self._purge_at = max(_PURGE_MIN_ENTRIES, len(heap) + len(heap) // 4)

    def _may_fire(self, entry: TimerEntry) -> bool:
        """`_entry_is_live` without its side effect (re-pushing a session entry that fired
        early): the owner of a session entry is still there and this is its newest entry."""
        if entry[2] == SESSION:
            return self._session_owner(entry) is not None
        return self._entry_is_live(entry)

    def _schedule_session(
        self, group: ClassicGroup, member: Member | PendingMember, timeout_ms: int, now_ms: int
    ) -> None:
        deadline = now_ms + timeout_ms
        member.deadline_ms = deadline
        if member.timer_seq == 0 or deadline < member.timer_at:
            member.timer_seq = self._push(deadline, SESSION, group.group_id, member.member_id)
            member.timer_at = deadline

    def _schedule_join(self, group: ClassicGroup, delay_ms: int, now_ms: int, kind: int) -> None:
        group.join_timer_seq = self._push(now_ms + delay_ms, kind, group.group_id)

    def _schedule_sync(self, group: ClassicGroup, now_ms: int) -> None:
        group.sync_timer_generation = group.generation_id
        group.sync_timer_seq = self._push(
            now_ms + group.rebalance_timeout_ms(), SYNC, group.group_id
        )

    def _session_owner(self, entry: TimerEntry) -> Member | PendingMember | None:
        group = self._groups.get(entry[3])
        if group is None:
            return None
        owner: Member | PendingMember | None = group.members.get(entry[4])
        if owner is None:
            owner = group.pending_members.get(entry[4])
        if owner is None or owner.timer_seq != entry[1]:
            return None
        return owner

    def _entry_is_live(self, entry: TimerEntry) -> bool:
        """Drop dead entries; push early session entries again at their real deadline."""
        kind = entry[2]
        if kind == SESSION:
            owner = self._session_owner(entry)
            if owner is None:
                return False
            if owner.deadline_ms > entry[0]:
                owner.timer_seq = self._push(owner.deadline_ms, SESSION, entry[3], entry[4])
                owner.timer_at = owner.deadline_ms
                return False
            return True
        if kind == RETENTION:
            return entry[1] == self._retention_seq
        group = self._groups.get(entry[3])
        if group is None:
            return False
        if kind == SYNC:
            return entry[1] == group.sync_timer_seq
        return entry[1] == group.join_timer_seq

    def next_deadline_ms(self) -> int | None:
        heap = self._heap
        while heap:
            entry = heapq.heappop(heap)
            if self._entry_is_live(entry):
                heapq.heappush(heap, entry)
                return entry[0]
        return None

"""The consumer groups' member timers: session timeouts and rebalance (revocation) timeouts.

Kafka keeps one timer per (group, member, kind) and reschedules it in place; we keep the
latest deadline per key in a dict and push every scheduling onto a heap, so a stale heap entry
(rescheduled or cancelled since) is recognised by its token and skipped. Soft state: nothing
here is persisted; loading schedules a fresh session timeout for every member, as Kafka does.

Pure: time is an argument.
"""

from __future__ import annotations

import enum
import heapq
import itertools
from dataclasses import dataclass

__all__ = ["DueTimer", "MemberTimers", "TimerKind"]


class TimerKind(enum.Enum):
    SESSION = "session"  # no heartbeat within the session timeout: fence the member
    REBALANCE = "rebalance"  # still at `epoch` after its rebalance timeout: fence the member
    # A classic member inside a consumer group (coordinator.core.consumer.classic), Kafka's
    # consumerGroupJoinKey / consumerGroupSyncKey: told to rejoin (or given a JoinGroup answer)
    # and still at `epoch` after its rebalance timeout: fenced as by REBALANCE (its epoch changes
    # only by rejoining, so the epoch check is Kafka's unconditional fencing).
    JOIN = "join"
    SYNC = "sync"
    # The group's deferred target assignment (coordinator.core.consumer.target), member id "".
    ASSIGNMENT = "assignment"


@dataclass(frozen=True, slots=True)
class DueTimer:
    kind: TimerKind
    group_id: str
    member_id: str
    epoch: int  # REBALANCE: the member epoch it was scheduled for; SESSION: unused (0)


_Entry = tuple[int, int, TimerKind, str, str, int]  # deadline, token, kind, group, member, epoch


class MemberTimers:
    __slots__ = ("_heap", "_latest", "_tokens")

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        # key -> its live heap entry (deadline, token, ...): the deadline is read in O(1)
        self._latest: dict[tuple[TimerKind, str, str], _Entry] = {}
        self._tokens = itertools.count()

    def schedule(
        self, kind: TimerKind, group_id: str, member_id: str, deadline_ms: int, epoch: int = 0
    ) -> None:
        entry = (deadline_ms, next(self._tokens), kind, group_id, member_id, epoch)
        self._latest[(kind, group_id, member_id)] = entry
        heapq.heappush(self._heap, entry)

    def cancel(self, kind: TimerKind, group_id: str, member_id: str) -> None:
        self._latest.pop((kind, group_id, member_id), None)

    def cancel_member(self, group_id: str, member_id: str) -> None:
        for kind in TimerKind:
            self.cancel(kind, group_id, member_id)

    def scheduled(self, kind: TimerKind, group_id: str, member_id: str) -> bool:
        return (kind, group_id, member_id) in self._latest

    def deadline_of(self, kind: TimerKind, group_id: str, member_id: str) -> int | None:
        entry = self._latest.get((kind, group_id, member_id))
        return None if entry is None else entry[0]

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            top = heap[0]
            if self._latest.get((top[2], top[3], top[4])) is top:
                return
            heapq.heappop(heap)

    def next_deadline_ms(self) -> int | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> list[DueTimer]:
        """The live timers due at `now_ms`, earliest first; they are consumed."""
        due: list[DueTimer] = []
        heap = self._heap
        while True:
            self._drop_stale()
            if not heap or heap[0][0] > now_ms:
                return due
            _, _, kind, gid, mid, epoch = heapq.heappop(heap)
            del self._latest[(kind, gid, mid)]
            due.append(DueTimer(kind, gid, mid, epoch))

"""Holding back the ConsumerGroupHeartbeats of members that wait on others (KIP-848).

A member waiting for partitions other members still hold, or for its group's paced target,
learns that they are free only on its next heartbeat: up to one heartbeat interval after its
holder released them (5 s by default in Kafka). When such a beat carries nothing new
(coordinator.core.consumer.hold), it is not processed at once: it waits here and goes into the
core as soon as its group changed and it is no longer waiting (`wake`, after every batch or
timer the runtime applies), another request arrived on its connection (`now`: responses stay
in request order, and a commit never waits behind a held beat), or half a heartbeat interval
after it arrived; a closed connection drops it (`drop`), a stop answers it NOT_COORDINATOR
(`close`, as the server answers what it parked). Processed later, it is answered as a
beat arriving then would be, which a client cannot tell from network delay; the member gets the
released partitions one round earlier. Kafka answers at once; we differ on purpose
(docs/compatibility.md).

A join answered "no partitions yet" is held the same way (`answered`): its answer is not sent;
the member's next plain beat (`hold.follow_up`) waits here in its place, and its answer, with
the assignment always in it, answers the join.

Invariants:
- A held beat keeps its connection busy (one request in flight per connection), so nothing on
  that connection is answered before it.
- At most one held beat per connection; every held beat has a timer, cancelled when it leaves.
- Only the plain connections' fast path holds beats (coordinator.serve.server); the general
  path and the sidecar's connections answer at once, as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable
from typing import Protocol

from coordinator.core.consumer.hold import follow_up, woken_groups
from coordinator.core.consumer.messages import ConsumerGroupHeartbeat, HeartbeatResponse
from coordinator.core.coordinator import GroupCoordinator
from coordinator.core.effects import AnyResult
from coordinator.core.records import Record
from protocol.codec import RequestHeader

__all__ = ["JOINED", "BeatHold", "HeldBeat"]

JOINED = object()  # the request context of a held join's follow-up (`BeatHold.answered`)


class Connection(Hashable, Protocol):
    """What a held beat needs of its connection (coordinator.serve.server.Connection)."""

    held_beat: HeldBeat | None


class HeldBeat:
    __slots__ = ("command", "conn", "header", "join", "t0", "timer")

    def __init__(
        self,
        conn: Connection,
        header: RequestHeader,
        command: ConsumerGroupHeartbeat,
        t0: int,
        join: bool = False,
    ) -> None:
        self.conn = conn
        self.header = header
        self.command = command
        self.t0 = t0  # its arrival, for the request-time metrics
        self.join = join  # a join's follow-up: its answer answers the join (`JOINED`)
        self.timer: asyncio.TimerHandle | None = None

    @property
    def context(self) -> object:
        """Its request context when it goes into the core (`BeatHold.answered` reads it)."""
        return JOINED if self.join else None


class BeatHold:
    """The held beats, by group. `core` is read on each use (a recovery replaces the core);
    `release(held)` puts a beat into the server's next batch, as if it had just arrived."""

    __slots__ = ("_core", "_groups", "_release")

    def __init__(
        self, core: Callable[[], GroupCoordinator], release: Callable[[HeldBeat], None]
    ) -> None:
        self._core = core
        self._release = release
        self._groups: dict[str, dict[Connection, HeldBeat]] = {}

    def __len__(self) -> int:
        return sum(len(held) for held in self._groups.values())

    def park(
        self,
        conn: Connection,
        header: RequestHeader,
        command: ConsumerGroupHeartbeat,
        t0: int,
        join: bool = False,
    ) -> bool:
        """Hold `command` if it only waits (True); False: process it now."""
        loop = asyncio.get_running_loop()
        now_ms = int(loop.time() * 1000)  # the runtime's clock (Runtime.now_ms)
        deadline_ms = self._core().hold_deadline_ms(command, now_ms, join)
        if deadline_ms is None:
            return False
        held = HeldBeat(conn, header, command, t0, join)
        held.timer = loop.call_later((deadline_ms - now_ms) / 1000, self._leave, held, True)
        conn.held_beat = held
        self._groups.setdefault(command.group_id, {})[conn] = held
        return True

    def answered(
        self, conn: Connection, header: RequestHeader, context: object, answer: AnyResult, t0: int
    ) -> AnyResult | None:
        """A fast-path ConsumerGroupHeartbeat's `answer`, `context` its join (or `JOINED`, its
        join's follow-up): the answer to send, or None if the join's answer waits."""
        if not isinstance(answer, HeartbeatResponse):
            return answer
        if context is JOINED:  # a join's answer carries the assignment, even if unchanged
            if answer.assignment is None and answer.member_epoch > 0:
                return HeartbeatResponse(
                    answer.error, answer.error_message, answer.member_id,
                    answer.member_epoch, answer.heartbeat_interval_ms, ()
                )  # fmt: skip
            return answer
        if not isinstance(context, ConsumerGroupHeartbeat) or conn.held_beat is not None:
            return answer
        beat = follow_up(context, answer)
        if beat is None or not self.park(conn, header, beat, t0, join=True):
            return answer
        return None

    def wake(self, records: list[Record]) -> None:
        """After records were applied: release the held beats of the groups they changed that
        are no longer waiting (the others wait on, until their deadline)."""
        if not self._groups or not records:
            return
        woken = woken_groups(r.key for r in records)
        core = self._core()
        for gid in woken & self._groups.keys():
            for held in list(self._groups[gid].values()):
                if not core.holdable(held.command):
                    self._leave(held, True)

    def now(self, conn: Connection) -> None:
        """Another request arrived on `conn`: its held beat goes first, now."""
        held = conn.held_beat
        if held is not None:
            self._leave(held, True)

    def drop(self, conn: Connection) -> None:
        """`conn` closed: nobody is waiting for its held beat's answer."""
        held = conn.held_beat
        if held is not None:
            self._leave(held, False)

    def close(self) -> list[HeldBeat]:
        """Drop every held beat; returns them (the server answers them NOT_COORDINATOR)."""
        dropped = [held for group in self._groups.values() for held in group.values()]
        for held in dropped:
            self._leave(held, False)
        return dropped

    def _leave(self, held: HeldBeat, process: bool) -> None:
        conn = held.conn
        if conn.held_beat is not held:
            return  # gone already (a timer that lost the race)
        conn.held_beat = None
        if held.timer is not None:
            held.timer.cancel()
        gid = held.command.group_id
        group = self._groups.get(gid)
        if group is not None:
            group.pop(conn, None)
            if not group:
                del self._groups[gid]
        if process:
            self._release(held)

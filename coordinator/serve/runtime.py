"""The runtime: the only place where the core's Effects turn into I/O.

For every request the server hands over, the runtime asks the core for Effects, persists their
records, and only then releases the replies (STYLE.md: a response leaves only after the records it
depends on are durable — Kafka's CoordinatorResult). Replies of a batch without records still wait
for every record appended before them, so no client can read state that a crash would undo.

It also owns the core's single timer: after each batch it re-arms one loop timer at the core's
next deadline, and fires `core.expire(now_ms)` when it is due.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Callable
from typing import Any, Protocol

from coordinator.core.coordinator import Effects, GroupCoordinator
from coordinator.core.effects import AnyCommand, AnyResult
from coordinator.core.events import Event
from coordinator.core.messages import Heartbeat, HeartbeatResult
from coordinator.core.records import Record

log = logging.getLogger("groupcoord.runtime")


class Journal(Protocol):
    """What the runtime needs of the log: ordered appends and a durability barrier."""

    def append(self, records: list[Record]) -> int:
        """Queue records in order; return a sequence number for `wait_durable`."""
        ...

    def durable_seq(self) -> int:
        """Every append with a sequence number <= this is durable."""
        ...

    def last_seq(self) -> int:
        """The sequence number of the latest append."""
        ...

    async def wait_durable(self, seq: int) -> None:
        """Return once `seq` is durable; raise if the log could not make it durable."""
        ...

    def on_durable(self, listener: Callable[[int], None]) -> None:
        """Have `listener(durable_seq)` called on the loop as soon as appends become durable.
        Optional: a journal may never call it (`wait_durable` still works)."""
        ...

    def lost(self, seq: int) -> bool:
        """The records of append `seq` will never be durable (their write failed). Asked only
        of a `seq` <= `durable_seq()` or whose `wait_durable` raised. A journal whose appends
        fail one at a time (a fleet's, one partition failing while others write) advances
        `durable_seq` past a lost append; the local log never does."""
        ...


class MemoryJournal:
    """A journal that keeps nothing: every append is 'durable' at once (tests, benchmarks)."""

    def __init__(self) -> None:
        self._seq = 0

    def append(self, records: list[Record]) -> int:
        self._seq += 1
        return self._seq

    def durable_seq(self) -> int:
        return self._seq

    def last_seq(self) -> int:
        return self._seq

    async def wait_durable(self, seq: int) -> None:
        return None

    def on_durable(self, listener: Callable[[int], None]) -> None:
        return None  # every append is durable at once: nothing is ever held

    def lost(self, seq: int) -> bool:
        return False


Responder = Callable[[int, AnyResult], None]
"""(reply_to, result) -> None: sends a result to whoever is waiting on reply_to."""

Failer = Callable[[int, BaseException], None]
"""(reply_to, error) -> None: the records a reply depended on could not be made durable."""

EventSink = Callable[[Event], None]

_NOT_DURABLE = RuntimeError("the records this reply depends on could not be written")

# (seq, replies, done, failed): released once `seq` is durable (see Runtime._hold).
_Held = tuple[
    int,
    list[tuple[int, AnyResult]],
    Callable[[], None] | None,
    Callable[[BaseException], None] | None,
]


class Runtime:
    def __init__(
        self,
        core: GroupCoordinator,
        journal: Journal,
        *,
        respond: Responder,
        fail: Failer,
        events: EventSink | None = None,
        on_write_failure: Callable[[BaseException], None] | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.core = core
        self.journal = journal
        self._respond = respond
        self._fail = fail
        self._events = events
        self._on_write_failure = on_write_failure
        self._loop = loop or asyncio.get_running_loop()
        self._timer: asyncio.Handle | None = None  # the deadline's, then the expiry's call_soon
        self._timer_deadline_ms: int | None = None
        self._next_reply_to = 0
        self._waiters: set[asyncio.Task[None]] = set()
        self._held: collections.deque[_Held] = collections.deque()
        self._releaser: asyncio.Task[None] | None = None
        self.last_write_error: BaseException | None = None  # set by a refused append
        # KIP-932: share partitions the core changed (a share member left, its records released),
        # for the sidecar's share state (coordinator.sidecar.share_state) to persist.
        self.on_share_updates: Callable[[list[Any]], None] | None = None
        # ...and the records of each batch, for the sidecar to see share assignments as they
        # are made (it starts the assigned share partitions then, as Kafka initializes them).
        self.on_records: Callable[[list[Record]], None] | None = None
        # ...and every applied batch's records, for the held consumer beats they may wake
        # (coordinator.serve.beat_hold).
        self.after_apply: Callable[[list[Record]], None] | None = None
        journal.on_durable(self._durable_advanced)

    def now_ms(self) -> int:
        return int(self._loop.time() * 1000)

    def new_reply_to(self) -> int:
        self._next_reply_to += 1
        return self._next_reply_to

    def heartbeat(self, command: Heartbeat) -> HeartbeatResult:
        """The hot path. A heartbeat writes no record and only moves session deadlines later, so
        it needs neither the durability barrier nor a timer re-arm (an armed timer that fires
        early finds nothing due). Kafka, too, answers heartbeats from memory."""
        result = self.core.heartbeat(command, self.now_ms())
        # A member without a live session timer gets one here; arm for it if it is the earliest.
        self._rearm()
        return result

    def submit(self, reply_to: int, command: AnyCommand) -> None:
        """Run one command through the core; its reply is delivered through `respond`."""
        self.apply(self.core.handle(reply_to, command, self.now_ms()))

    def submit_many(self, commands: list[tuple[int, AnyCommand]]) -> None:
        """`submit` for several commands at once: one pass through the core, one append of all
        their records, their replies held together until it is durable (a reply may then wait
        for records appended after it, never the other way round)."""
        self.apply(self.core.handle_many(commands, self.now_ms()))

    def apply(self, effects: Effects) -> None:
        if self._events is not None:
            for event in effects.events:
                self._events(event)
        if effects.share_updates and self.on_share_updates is not None:
            self.on_share_updates(effects.share_updates)
        if effects.records and self.on_records is not None:
            self.on_records(effects.records)
        journal = self.journal
        try:
            seq = journal.append(effects.records) if effects.records else journal.last_seq()
        except Exception as exc:  # the log refuses appends (a failed disk): nothing is acked
            self.last_write_error = exc
            self._write_failed(effects.replies, exc)
            self._arm_timer()
            return
        if effects.replies:
            if seq > self.journal.durable_seq():
                self._hold(seq, effects.replies)
            elif effects.records and journal.lost(seq):
                # A fleet's journal refused it at once (a group of a state partition this
                # member does not own): "durable" already, as lost appends are.
                self._write_failed(effects.replies, _NOT_DURABLE)
            else:
                self._release(effects.replies)
        self._rearm()
        if self.after_apply is not None:
            self.after_apply(effects.records)

    def _release(self, replies: list[tuple[int, AnyResult]]) -> None:
        respond = self._respond
        for reply_to, result in replies:
            respond(reply_to, result)

    def _hold(
        self,
        seq: int,
        replies: list[tuple[int, AnyResult]],
        done: Callable[[], None] | None = None,
        failed: Callable[[BaseException], None] | None = None,
    ) -> None:
        """Keep replies (and `apply_then`'s callbacks) until `seq` is durable. Held entries are in
        seq order, so one releaser task serves them all: a task per reply cost more than the rest
        of a commit's bookkeeping."""
        self._held.append((seq, replies, done, failed))
        if self._releaser is None:
            task = self._loop.create_task(self._release_held())
            self._releaser = task
            self._waiters.add(task)
            task.add_done_callback(self._waiters.discard)

    async def _release_held(self) -> None:
        held = self._held
        journal = self.journal
        try:
            while held:
                try:
                    # The oldest first: one group-commit flush usually covers every held entry.
                    await journal.wait_durable(held[0][0])
                except Exception as exc:  # the log refused or failed: never ack what it lost
                    if not self._settle_failure(exc):
                        return
                    continue
                self._durable_advanced(journal.durable_seq())
        finally:
            self._releaser = None

    def _settle_failure(self, exc: BaseException) -> bool:
        """A wait for durability raised: fail every held entry the journal lost, release the
        durable ones, keep the undecided ones (another partition of a fleet's journal may still
        be writing them). True if some are still held."""
        journal = self.journal
        held = self._held
        durable = journal.durable_seq()
        lost: list[tuple[int, AnyResult]] = []
        kept: list[_Held] = []
        while held:
            entry = held.popleft()
            seq, replies, done, failed = entry
            if journal.lost(seq):
                lost.extend(replies)
                if failed is not None:
                    failed(exc)
            elif seq <= durable:
                self._release(replies)
                if done is not None:
                    done()
            else:
                kept.append(entry)
        held.extend(kept)
        self._write_failed(lost, exc)
        return bool(kept)

    def _durable_advanced(self, durable: int) -> None:
        """Release what is durable now. The journal calls this right when a flush completes;
        the releaser task would see it only a pass of the loop later, and on a busy loop a pass
        is a whole batch of requests (~3 ms of a 6 ms group-commit cycle, measured)."""
        held = self._held
        lost = self.journal.lost
        while held and held[0][0] <= durable:
            seq, replies, done, failed = held.popleft()
            if lost(seq):  # a fleet journal's partition failed while others went on
                self._write_failed(replies, _NOT_DURABLE)
                if failed is not None:
                    failed(_NOT_DURABLE)
                continue
            self._release(replies)
            if done is not None:
                done()

    def _write_failed(self, replies: list[tuple[int, AnyResult]], exc: BaseException) -> None:
        log.error("log write failed; %d replies get a retriable error: %s", len(replies), exc)
        for reply_to, _ in replies:
            self._fail(reply_to, exc)
        if self._on_write_failure is not None:
            self._on_write_failure(exc)

    # -- the single timer ------------------------------------------------------------------------

    def _rearm(self) -> None:
        """After a command: re-arm only if the heap's top is earlier than the armed deadline, an
        O(1) check (most commands push no timer; `_arm_timer`'s exact answer pops dead entries
        off the heap). A timer armed for an entry that died since fires early, finds nothing due
        and re-arms (`_on_timer` clears the armed deadline first)."""
        earliest = self.core.earliest_timer_ms()
        armed = self._timer_deadline_ms
        if earliest is not None and (armed is None or earliest < armed):
            self._arm_timer()

    def _arm_timer(self) -> None:
        deadline = self.core.next_deadline_ms()
        if deadline == self._timer_deadline_ms:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_deadline_ms = deadline
        if deadline is not None:
            # +0.5 ms: the loop's float clock must not fire before the core's integer deadline.
            self._timer = self._loop.call_at(deadline / 1000 + 0.0005, self._on_timer)

    def _on_timer(self) -> None:
        # The loop runs due timers after its poll of the sockets (libuv >= 1.45, as asyncio's
        # own loop), and the server hands what that poll read to the core from a call_soon (its
        # batch of beats and commits), queued before this: expiring from a call_soon too puts
        # the requests that were already waiting when a deadline passed first -- the heartbeat
        # that keeps a session, the joins a paced target run should fold in (after a loop pass
        # longer than the pacer's quiet window, a burst of joins looked quiet and got a target
        # run of its own halfway; issue 38). The armed deadline stays set meanwhile, so
        # commands in between do not arm it again.
        self._timer = self._loop.call_soon(self._expire)

    def _expire(self) -> None:
        self._timer = None
        self._timer_deadline_ms = None
        self.apply(self.core.expire(self.now_ms()))

    def apply_then(
        self,
        effects: Effects,
        done: Callable[[], None],
        failed: Callable[[BaseException], None],
    ) -> None:
        """`apply`, then call `done()` once the effects' records (and every record appended
        before them) are durable, or `failed(exc)` if they cannot be: for a reply that is not a
        core Result (the topic admin APIs, coordinator.serve.topic_service)."""
        self.last_write_error = None
        self.apply(effects)
        if self.last_write_error is not None:
            failed(self.last_write_error)
            return
        seq = self.journal.last_seq()
        if seq <= self.journal.durable_seq():
            if effects.records and self.journal.lost(seq):  # refused at once (see `apply`)
                failed(_NOT_DURABLE)
            else:
                done()
            return
        self._hold(seq, [], done, failed)

    async def drain(self) -> None:
        """Wait until every reply held for durability has been released or failed."""
        while self._waiters:
            await asyncio.gather(*list(self._waiters), return_exceptions=True)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

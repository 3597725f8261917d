"""One share partition's delivery state (KIP-932): Kafka 4.4's `kafka.server.share.SharePartition`.

A share group reads a topic partition with many members at once. Each record the group has
fetched but not finished with is "in flight" and has a state (AVAILABLE, ACQUIRED, ACKNOWLEDGED,
ARCHIVED), a delivery count and, while ACQUIRED, an acquisition lock (owner member id, expiry).
This module is pure: no I/O, no clock; every time is a monotonic `now_ms` passed in.

How the shell uses it (the ShareFetch / ShareAcknowledge side, sidecar mode):
- One `SharePartition` per (group id, topic id, partition), made from the group's
  `SharePartitionConfig` (`coordinator.core.share.config` derives it from the settings and the
  group's configs), or rebuilt with `SharePartition.from_snapshot(snapshot, config)` followed by
  `apply_update(u)` for each `ShareUpdate` written after that snapshot.
- Fetch upstream from `next_fetch_offset()`, only while `can_acquire()`; hand the fetched batches'
  (base offset, last offset) pairs to `acquire(...)`, which returns the ranges to deliver to the
  member (first, last, delivery count): the ShareFetch response's AcquiredRecords.
- `acknowledge(member, batches, now_ms)` returns the partition's error code and the
  `ShareUpdate` to persist before answering (nothing changed if the error is not NONE: one
  acknowledgement is all or nothing, as Kafka rolls back the whole request on a failure).
- `release_member(member)` when a member leaves or its share session closes;
  `expire(now_ms)` at `next_deadline()`; `advance_start_offset(log_start_offset)` when the
  upstream log start moved past the start offset (retention, DeleteRecords).
- Every method that changes persisted state returns a `ShareUpdate` (None: nothing persisted
  changed). Write it; every `snapshot_due()` updates, write `take_snapshot()` instead.

Rules (Kafka's, cited by method):
- SPSO (`start_offset`) is the first offset not yet terminal; it only moves forward, over
  contiguous ACKNOWLEDGED/ARCHIVED records. SPEO (`end_offset`) is the last offset in flight.
- Acquiring a record increments its delivery count; a record released (RELEASE, lock expiry,
  member left) whose delivery count reached `delivery_count_limit` is ARCHIVED instead of
  AVAILABLE (InFlightState.tryUpdateState). An acquired record below the SPSO is archived.
- No offset is acquired by two members at once; terminal records are never acquired again.
- At most `max_record_locks` offsets in [SPSO, SPEO] (group.share.partition.max.record.locks).
- ACQUIRED is never persisted: a restart forgets the locks and the delivery that was running,
  as Kafka does (its persister only writes AVAILABLE, ACKNOWLEDGED and ARCHIVED).

Intended differences from Kafka: state is per offset once anything but a whole ACCEPT touches a
run (inflight.Run), so a redelivery is cut at exactly `max_records` (Kafka may hand out a whole
fetched batch); records past `max_records` of a fetched batch in record_limit mode are not cached
(fetched again; Kafka keeps them AVAILABLE, delivery count 0); the throttle of records near their
delivery limit halves `max_records` rather than the in-flight batch's size.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence

from coordinator.core.messages import ErrorCode
from coordinator.core.share import inflight
from coordinator.core.share.inflight import (
    ACCEPT,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    RENEW,
    Rec,
    Run,
)
from coordinator.core.share.persisted import (
    NO_START_OFFSET,
    RecordState,
    ShareSnapshot,
    ShareUpdate,
    StateBatch,
)
from coordinator.core.share.values import (
    ACK_TYPES,
    Acknowledged,
    AcknowledgeType,
    Acquired,
    AcquiredRecords,
    AcquireMode,
    SharePartitionConfig,
    batch_end,
    coalesce,
)

__all__ = [
    "AcknowledgeType",
    "Acknowledged",
    "AcquireMode",
    "Acquired",
    "AcquiredRecords",
    "RecordState",
    "SharePartition",
    "SharePartitionConfig",
    "ShareSnapshot",
    "ShareUpdate",
    "StateBatch",
]

AcknowledgementBatch = tuple[int, int, Sequence[int]]  # (first offset, last offset, ack types)
_MIN_THROTTLE_DELIVERY_COUNT = 2  # SharePartition.MINIMUM_THROTTLE_RECORDS_DELIVERY_LIMIT


class SharePartition:
    """The mutable state of one share partition; see the module docstring."""

    def __init__(
        self,
        config: SharePartitionConfig,
        start_offset: int = 0,
        *,
        state_epoch: int = 0,
        leader_epoch: int = 0,
        snapshot_epoch: int = 0,
    ) -> None:
        self.config = config
        self.state_epoch = state_epoch
        self.leader_epoch = leader_epoch
        self.snapshot_epoch = snapshot_epoch
        self.updates_since_snapshot = 0
        self._start = start_offset
        self._end = start_offset - 1  # no offset in flight
        self._recs: dict[int, Rec] = {}  # [start, end] and acquired ones left below start
        self._runs: dict[int, Run] = {}  # first offset -> run, within [start, end], not in _recs
        self._heap: list[tuple[int, int]] = []  # (expiry, lock token), stale entries skipped
        self._lock_ranges: dict[int, list[tuple[int, int]]] = {}
        self._lock_live: dict[int, int] = {}  # token -> offsets still holding it
        self._heap_expiry: dict[int, int] = {}  # expiry of the lock being filled
        self._next_token = 1
        self._base = start_offset  # the lowest offset kept
        self._changes: dict[int, Rec] = {}
        self._start_before = start_offset
        self.expired_locks = 0  # acquisition locks that timed out (a metric, not persisted)

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def end_offset(self) -> int:
        """The last offset in flight (start_offset - 1 when none is)."""
        return self._end

    def in_flight_count(self) -> int:
        return max(0, self._end - self._start + 1)

    def record(self, offset: int) -> tuple[RecordState, int, str] | None:
        """(state, delivery count, owner member id) of an offset in flight, for tests and admin."""
        inflight.materialize(self._recs, self._runs)
        rec = self._recs.get(offset)
        return None if rec is None else (rec.state, rec.delivery_count, rec.member_id)

    def acquired_by(self, member_id: str) -> list[int]:
        inflight.materialize(self._recs, self._runs)
        return sorted(
            o
            for o, r in self._recs.items()
            if r.state is RecordState.ACQUIRED and r.member_id == member_id
        )

    def next_fetch_offset(self) -> int:
        """Where the next upstream fetch starts: the first AVAILABLE offset, else past SPEO."""
        return inflight.first_available(self._recs, self._runs, self._start, self._end)

    def can_acquire(self) -> bool:
        """Kafka's canAcquireRecords: something in flight is AVAILABLE, or there is room."""
        if self.next_fetch_offset() <= self._end:
            return True
        return self.in_flight_count() < self.config.max_record_locks

    def next_deadline(self) -> int | None:
        """The earliest acquisition-lock expiry, for the shell's timer."""
        while self._heap and self._heap[0][1] not in self._lock_live:
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def delivery_complete_count(self) -> int:
        return inflight.terminal_count(self._recs, self._runs, self._start, self._end)

    def acquire(
        self,
        member_id: str,
        batches: Sequence[tuple[int, int]],
        now_ms: int,
        *,
        max_records: int,
        batch_size: int | None = None,
        mode: AcquireMode = AcquireMode.BATCH_OPTIMIZED,
        fetch_offset: int | None = None,
        aborted: Iterable[tuple[int, int]] = (),
    ) -> Acquired:
        """Acquire fetched records for `member_id` (SharePartition.acquire).

        `batches` are the upstream record batches' (base offset, last offset), ascending, read
        from `fetch_offset` (default: the first base offset). `max_records` is MaxRecords, a soft
        limit in batch_optimized mode (a new fetched batch is taken whole); `batch_size` splits
        the new records into AcquiredRecords of about that size at fetched-batch boundaries.
        `aborted` are offset ranges of aborted transactions' records (read_committed): they
        are archived and not delivered, as Kafka's filterAbortedTransactionalAcquiredRecords.
        """
        self._begin()
        if max_records <= 0 or not batches or batches[-1][1] < self._start:
            return Acquired((), 0, None)
        first_base, last = batches[0][0], batches[-1][1]
        fetched_from = first_base if fetch_offset is None else fetch_offset
        if self._runs and min(fetched_from, first_base) <= self._end:
            inflight.materialize(self._recs, self._runs)  # the fetch reaches into what is in flight
        self._archive_compacted(fetched_from, first_base)
        limit = min(max_records, self.config.max_record_locks - self.in_flight_count())
        last_to = last
        if limit <= 0:
            if fetched_from > self._end:
                return Acquired((), 0, self._finish())
            # Fetching inside the in-flight window: redeliveries only (lastOffsetAndMaxRecords).
            limit = min(max_records, self._end - fetched_from + 1)
            last_to = min(last, self._end)
        first = max(first_base, self._start)
        if self._start > self._end and first > self._start:
            self._start, self._end = first, first - 1  # nothing in flight: the log starts later
        lock = self._new_lock(now_ms)
        found, stopped = self._acquire_cached(member_id, lock, first, last_to, limit)
        count = sum(r.last_offset - r.first_offset + 1 for r in found)
        if not stopped and count < limit and last_to > self._end:
            found += self._acquire_new(
                member_id,
                lock,
                batches,
                max(first, self._end + 1),
                last_to,
                limit - count,
                batch_size,
                mode,
            )
        self._seal_lock(lock)
        records = self._drop_aborted(found, aborted)
        self._advance()
        delivered = sum(r.last_offset - r.first_offset + 1 for r in records)
        return Acquired(tuple(records), delivered, self._finish())

    def _archive_compacted(self, fetched_from: int, first_base: int) -> None:
        # maybeArchiveStaleBatches: AVAILABLE offsets between the fetch offset and the first
        # fetched batch no longer exist upstream (compaction) and would block the SPSO.
        for offset in range(max(fetched_from, self._start), min(first_base - 1, self._end) + 1):
            rec = self._recs[offset]
            if rec.state is RecordState.AVAILABLE:
                self._set(offset, rec, RecordState.ARCHIVED)

    def _acquire_cached(
        self, member_id: str, lock: int, first: int, last: int, limit: int
    ) -> tuple[list[AcquiredRecords], bool]:
        """Redeliver AVAILABLE offsets in [first, min(last, SPEO)]; True if told to stop there."""
        max_count = self.config.delivery_count_limit
        throttle_at = max(_MIN_THROTTLE_DELIVERY_COUNT, -(-max_count // 2))
        cap: int | None = None
        got: list[tuple[int, int]] = []
        stopped = False
        for offset in range(first, min(last, self._end) + 1):
            if len(got) >= limit or (cap is not None and len(got) >= cap):
                stopped = True
                break
            rec = self._recs[offset]
            if rec.state is not RecordState.AVAILABLE:
                continue
            count = rec.delivery_count
            if got and max_count > 2 and count == max_count - 1:
                stopped = True  # a record's last delivery goes alone, in the next fetch
                break
            if count >= throttle_at and cap is None:
                if got:
                    stopped = True  # a throttled record starts the next fetch
                    break
                cap = max(1, limit >> (count - throttle_at + 1))
            self._take(offset, rec, member_id, lock, count + 1)
            got.append((offset, rec.delivery_count))
            if max_count > 2 and rec.delivery_count == max_count:
                stopped = True  # delivered alone on its last attempt
                break
        return coalesce(got), stopped

    def _acquire_new(
        self,
        member_id: str,
        lock: int,
        batches: Sequence[tuple[int, int]],
        first: int,
        last: int,
        limit: int,
        batch_size: int | None,
        mode: AcquireMode,
    ) -> list[AcquiredRecords]:
        """Acquire offsets past SPEO (acquireNewBatchRecords / createBatches)."""
        if last - first + 1 > limit:
            cut = first + limit - 1
            last = cut if mode is AcquireMode.RECORD_LIMIT else batch_end(batches, cut)
        for offset in range(self._end + 1, first):
            self._recs[offset] = rec = Rec(RecordState.AVAILABLE, 0)  # a hole upstream
            self._set(offset, rec, RecordState.ARCHIVED)
        # _take for each new offset: one Run, its lock's bookkeeping done once
        if last >= first:
            self._runs[first] = Run(first, last, member_id, lock)
            self._lock_live[lock] = self._lock_live.get(lock, 0) + last - first + 1
            ranges = self._lock_ranges.setdefault(lock, [])
            if ranges and ranges[-1][1] == first - 1:
                ranges[-1] = (ranges[-1][0], last)
            else:
                ranges.append((first, last))
        self._end = last
        if mode is AcquireMode.RECORD_LIMIT or batch_size is None or last - first + 1 <= batch_size:
            return [AcquiredRecords(first, last, 1)]
        out: list[AcquiredRecords] = []
        current = first
        for base, _ in batches:
            if base > last:
                break
            if base - current >= batch_size:
                out.append(AcquiredRecords(current, base - 1, 1))
                current = base
        out.append(AcquiredRecords(current, last, 1))
        return out

    def _drop_aborted(
        self, found: list[AcquiredRecords], aborted: Iterable[tuple[int, int]]
    ) -> list[AcquiredRecords]:
        spans = sorted(aborted)
        if not spans:
            return found
        inflight.materialize(self._recs, self._runs)
        out: list[AcquiredRecords] = []
        for rng in found:
            kept: list[tuple[int, int]] = []
            for offset in range(rng.first_offset, rng.last_offset + 1):
                if any(a <= offset <= b for a, b in spans):
                    self._set(offset, self._recs[offset], RecordState.ARCHIVED)
                else:
                    kept.append((offset, rng.delivery_count))
            out += coalesce(kept)
        return out

    def acknowledge(
        self, member_id: str, batches: Sequence[AcknowledgementBatch], now_ms: int
    ) -> Acknowledged:
        """Apply one request's acknowledgements for `member_id`, all or nothing."""
        self._begin()
        whole = inflight.accepted_runs(self._runs, member_id, batches) if self._runs else None
        if whole is not None:
            args = (self._runs, self._recs, self._changes, self._unlock_many, self._start)
            self._start = inflight.accept(whole, *args)
            self._advance()
            return Acknowledged(ErrorCode.none, self._finish())
        inflight.materialize(self._recs, self._runs)
        plan: dict[int, AcknowledgeType] = {}
        for first, last, types in batches:
            refused = self._check_batch(member_id, first, last, types, plan)
            if refused is not None:
                return refused
        renewed: list[int] = []
        recs, changes = self._recs, self._changes
        accepted: dict[int, int] = {}  # lock token -> offsets accepted (_unlock, once per lock)
        for offset, ack in plan.items():
            rec = recs[offset]
            if ack is ACCEPT:  # _set(offset, rec, ACKNOWLEDGED) of an ACQUIRED record
                accepted[rec.lock] = accepted.get(rec.lock, 0) + 1
                rec.state = ACKNOWLEDGED
                rec.member_id = ""
                changes[offset] = rec
            elif ack is AcknowledgeType.RELEASE:
                self._release(offset, rec)
            elif ack is AcknowledgeType.RENEW:
                renewed.append(offset)
            else:  # REJECT, GAP
                self._set(offset, rec, RecordState.ARCHIVED)
        for token, count in accepted.items():
            self._unlock_many(token, count)
        if renewed:
            lock = self._new_lock(now_ms)
            for offset in renewed:
                rec = self._recs[offset]
                self._take(offset, rec, member_id, lock, rec.delivery_count)
            self._seal_lock(lock)
        self._advance()
        return Acknowledged(ErrorCode.none, self._finish())

    def _check_batch(
        self,
        member_id: str,
        first: int,
        last: int,
        types: Sequence[int],
        plan: dict[int, AcknowledgeType],
    ) -> Acknowledged | None:
        bad, wrong = ErrorCode.invalid_request, ErrorCode.invalid_record_state
        if first > last or not types or (len(types) != 1 and len(types) != last - first + 1):
            return Acknowledged(bad, None, "Invalid acknowledgement batch.")
        if any(t not in ACK_TYPES for t in types):
            return Acknowledged(bad, None, f"Invalid acknowledge type: {list(types)}")
        if last < self._start:
            return None  # below the SPSO: already done, ignored (offsets there are skipped too)
        if self._end < self._start:
            return Acknowledged(wrong, None, "Batch record not found.")
        if first > self._end:
            return Acknowledged(bad, None, "The first offset in request is past acquired records.")
        if last > self._end:
            return Acknowledged(bad, None, "The last offset in request is past acquired records.")
        recs = self._recs
        acks = [AcknowledgeType(t) for t in types]
        single = acks[0] if len(acks) == 1 else None
        renew_refused = not self.config.renew_enabled
        for offset in range(max(first, self._start), last + 1):
            rec = recs[offset]
            if rec.state is not ACQUIRED or offset in plan:
                return Acknowledged(wrong, None, "The offset is not acquired.")
            if rec.member_id != member_id:
                return Acknowledged(wrong, None, "Member is not the owner of offset.")
            ack = single if single is not None else acks[offset - first]
            if ack is RENEW and renew_refused:
                return Acknowledged(wrong, None, "Renewing acquisition locks is not enabled.")
            plan[offset] = ack
        return None

    def release_member(self, member_id: str) -> ShareUpdate | None:
        """Release every record `member_id` holds (releaseAcquiredRecords: member left)."""
        self._begin()
        inflight.materialize(self._recs, self._runs)
        for offset in self.acquired_by(member_id):
            self._release(offset, self._recs[offset])
        self._advance()
        return self._finish()

    def expire(self, now_ms: int) -> ShareUpdate | None:
        """Release the records whose acquisition lock expired at or before `now_ms`."""
        self._begin()
        inflight.materialize(self._recs, self._runs)
        while self._heap and self._heap[0][0] <= now_ms:
            _, token = heapq.heappop(self._heap)
            self.expired_locks += token in self._lock_live
            for first, last in self._lock_ranges.get(token, ()):
                for offset in range(first, last + 1):
                    rec = self._recs.get(offset)
                    if rec is not None and rec.state is RecordState.ACQUIRED and rec.lock == token:
                        self._release(offset, rec)
        self._advance()
        return self._finish()

    def advance_start_offset(self, log_start_offset: int) -> ShareUpdate | None:
        """The upstream log start moved (updateCacheAndOffsets): AVAILABLE records below it are
        archived and the SPSO jumps to it; records still acquired there are archived on release."""
        self._begin()
        inflight.materialize(self._recs, self._runs)
        if log_start_offset <= self._start:
            return None
        for offset in range(self._start, min(log_start_offset - 1, self._end) + 1):
            rec = self._recs[offset]
            if rec.state is RecordState.AVAILABLE:
                self._set(offset, rec, RecordState.ARCHIVED)
        self._start = log_start_offset
        self._end = max(self._end, log_start_offset - 1)
        self._advance()
        return self._finish()

    def snapshot(self) -> ShareSnapshot:
        """The persisted view now: ACQUIRED shows as the AVAILABLE record it was before this
        delivery (locks are not persisted); AVAILABLE records never delivered are left out."""
        recs = self._recs  # a run's offsets are left out, as never delivered before
        kept = ((o, r) for o in range(self._start, self._end + 1) if (r := recs.get(o)))
        return ShareSnapshot(
            snapshot_epoch=self.snapshot_epoch,
            state_epoch=self.state_epoch,
            leader_epoch=self.leader_epoch,
            start_offset=self._start,
            delivery_complete_count=self.delivery_complete_count(),
            state_batches=tuple(inflight.state_batches(kept)),
        )

    def snapshot_due(self, updates_per_snapshot: int = 500) -> bool:
        """share.coordinator.snapshot.update.records.per.snapshot (Kafka's default 500)."""
        return self.updates_since_snapshot >= updates_per_snapshot

    def take_snapshot(self) -> ShareSnapshot:
        """A new full snapshot, starting a new snapshot epoch for the updates that follow."""
        self.snapshot_epoch += 1
        self.updates_since_snapshot = 0
        return self.snapshot()

    @classmethod
    def from_snapshot(cls, snapshot: ShareSnapshot, config: SharePartitionConfig) -> SharePartition:
        part = cls(
            config,
            snapshot.start_offset,
            state_epoch=snapshot.state_epoch,
            leader_epoch=snapshot.leader_epoch,
            snapshot_epoch=snapshot.snapshot_epoch,
        )
        part._load(snapshot.state_batches)
        return part

    def apply_update(self, update: ShareUpdate) -> bool:
        """Replay one ShareUpdate; False (and nothing done) if it belongs to another snapshot."""
        if update.snapshot_epoch != self.snapshot_epoch:
            return False
        self._load(update.state_batches)
        if update.start_offset != NO_START_OFFSET and update.start_offset > self._start:
            self._start = update.start_offset
            self._end = max(self._end, self._start - 1)
        self._advance()
        self.updates_since_snapshot += 1
        return True

    def _load(self, batches: Iterable[StateBatch]) -> None:
        inflight.materialize(self._recs, self._runs)
        for batch in batches:
            for offset in range(max(batch.first_offset, self._start), batch.last_offset + 1):
                for hole in range(self._end + 1, offset):
                    self._recs[hole] = Rec(RecordState.AVAILABLE, 0)
                self._end = max(self._end, offset)
                self._recs[offset] = Rec(RecordState(batch.delivery_state), batch.delivery_count)
        self._advance()

    def _begin(self) -> None:
        self._changes = {}
        self._start_before = self._start

    def _finish(self) -> ShareUpdate | None:
        moved = self._start != self._start_before
        if not self._changes and not moved:
            return None
        changed = sorted((o, r) for o, r in self._changes.items() if o >= self._start)
        self._changes = {}
        self.updates_since_snapshot += 1
        return ShareUpdate(
            snapshot_epoch=self.snapshot_epoch,
            leader_epoch=self.leader_epoch,
            start_offset=self._start if moved else NO_START_OFFSET,
            delivery_complete_count=self.delivery_complete_count(),
            state_batches=tuple(inflight.state_batches(changed, keep_undelivered=True)),
        )

    def _set(self, offset: int, rec: Rec, state: RecordState) -> None:
        if rec.state is RecordState.ACQUIRED:
            self._unlock(rec)
        rec.state = state
        rec.member_id = ""
        self._changes[offset] = rec

    def _release(self, offset: int, rec: Rec) -> None:
        spent = rec.delivery_count >= self.config.delivery_count_limit
        self._set(
            offset,
            rec,
            RecordState.ARCHIVED if spent or offset < self._start else RecordState.AVAILABLE,
        )

    def _take(self, offset: int, rec: Rec, member_id: str, lock: int, delivery_count: int) -> None:
        if rec.state is RecordState.ACQUIRED:
            self._unlock(rec)
        rec.state = RecordState.ACQUIRED
        rec.delivery_count = delivery_count
        rec.member_id = member_id
        rec.lock = lock
        self._lock_live[lock] = self._lock_live.get(lock, 0) + 1
        ranges = self._lock_ranges.setdefault(lock, [])
        if ranges and ranges[-1][1] == offset - 1:
            ranges[-1] = (ranges[-1][0], offset)
        else:
            ranges.append((offset, offset))

    def _unlock(self, rec: Rec) -> None:
        self._unlock_many(rec.lock, 1)

    def _unlock_many(self, token: int, count: int) -> None:
        left = self._lock_live.get(token, 0) - count
        if left > 0:
            self._lock_live[token] = left
        else:
            self._lock_live.pop(token, None)
            self._lock_ranges.pop(token, None)

    def _new_lock(self, now_ms: int) -> int:
        token = self._next_token
        self._next_token += 1
        self._heap_expiry[token] = now_ms + self.config.record_lock_duration_ms
        return token

    def _seal_lock(self, token: int) -> None:
        expiry = self._heap_expiry.pop(token)
        if token in self._lock_live:
            heapq.heappush(self._heap, (expiry, token))

    def _advance(self) -> None:
        recs, start, end = self._recs, self._start, self._end
        while start <= end:
            rec = recs.get(start)  # None: a run's first offset (ACQUIRED)
            if rec is None or (rec.state is not ACKNOWLEDGED and rec.state is not ARCHIVED):
                break
            start += 1
        self._start = start
        # Forget what lies below the SPSO, up to the first record still acquired there.
        base = self._base
        while base < start:
            rec = recs.get(base)
            if rec is None:
                base = min((o for o in recs if o < start), default=start)
            elif rec.state is ACQUIRED:
                break
            else:
                del recs[base]
                base += 1
        self._base = base

"""The in-flight records of a share partition (coordinator.core.share.partition): one Rec per
offset in [SPSO, SPEO], or one Run for new offsets acquired together and not touched since (a
500-record acquire and accept is then a few dict operations, not a thousand); and the runs of
records that are persisted (StateBatch). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from coordinator.core.share.persisted import RecordState, StateBatch
from coordinator.core.share.values import AcknowledgeType

# The members as module constants: the per-offset loops compare with `is` and no attribute look-up.
AVAILABLE = RecordState.AVAILABLE
ACQUIRED = RecordState.ACQUIRED
ACKNOWLEDGED = RecordState.ACKNOWLEDGED
ARCHIVED = RecordState.ARCHIVED
ACCEPT = AcknowledgeType.ACCEPT
RENEW = AcknowledgeType.RENEW


class Rec:
    """One offset in flight: its state, delivery count and, while ACQUIRED, its lock."""

    __slots__ = ("delivery_count", "lock", "member_id", "state")

    def __init__(
        self,
        state: RecordState,
        delivery_count: int,
        member_id: str = "",
        lock: int = 0,
    ) -> None:
        self.state = state
        self.delivery_count = delivery_count
        self.member_id = member_id
        self.lock = lock  # the acquisition lock's token while ACQUIRED


def state_batches(
    items: Iterable[tuple[int, Rec]], *, keep_undelivered: bool = False
) -> list[StateBatch]:
    out: list[StateBatch] = []
    for offset, rec in items:
        state, count = rec.state, rec.delivery_count
        if state is RecordState.ACQUIRED:
            state, count = RecordState.AVAILABLE, count - 1
        if state is RecordState.AVAILABLE and count == 0 and not keep_undelivered:
            continue
        last = out[-1] if out else None
        if (
            last
            and last.last_offset == offset - 1
            and (last.delivery_state, last.delivery_count) == (state, count)
        ):
            out[-1] = StateBatch(last.first_offset, offset, state, count)
        else:
            out.append(StateBatch(offset, offset, state, count))
    return out


class Run:
    """Offsets [first, last] acquired together as new records (delivery count 1) by one member
    under one lock, kept as one entry (Kafka's InFlightBatch) until something other than an
    ACCEPT of whole runs by their owner touches one of them: then `materialize` turns it into
    one Rec per offset, the same state the per-offset acquisition made."""

    __slots__ = ("first", "last", "lock", "member_id")

    def __init__(self, first: int, last: int, member_id: str, lock: int) -> None:
        self.first = first
        self.last = last
        self.member_id = member_id
        self.lock = lock


def materialize(recs: dict[int, Rec], runs: dict[int, Run]) -> None:
    """Every run into per-offset records (ACQUIRED, delivery count 1, the run's owner and lock)."""
    for run in runs.values():
        member_id, lock = run.member_id, run.lock
        for offset in range(run.first, run.last + 1):
            recs[offset] = Rec(ACQUIRED, 1, member_id, lock)
    runs.clear()


def first_available(recs: dict[int, Rec], runs: dict[int, Run], start: int, end: int) -> int:
    """The first AVAILABLE offset in [start, end] (runs are ACQUIRED: skipped whole); end + 1
    if none."""
    offset = start
    while offset <= end:
        run = runs.get(offset)
        if run is not None:
            offset = run.last + 1
        elif recs[offset].state is AVAILABLE:
            return offset
        else:
            offset += 1
    return end + 1


def terminal_count(recs: dict[int, Rec], runs: dict[int, Run], start: int, end: int) -> int:
    """ACKNOWLEDGED and ARCHIVED offsets in [start, end]."""
    count, offset = 0, start
    while offset <= end:
        run = runs.get(offset)
        if run is not None:
            offset = run.last + 1
            continue
        state = recs[offset].state
        count += state is ACKNOWLEDGED or state is ARCHIVED
        offset += 1
    return count


def accepted_runs(
    runs: dict[int, Run], member_id: str, batches: Sequence[tuple[int, int, Sequence[int]]]
) -> list[Run] | None:
    """The runs an acknowledgement accepts whole, if that is all it does: single-type ACCEPT
    batches from the runs' owner, not overlapping, which together cover whole runs (one batch
    per AcquiredRecords range of a run, or one for several runs). None: anything else (the
    per-offset path decides, errors included)."""
    spans: list[list[int]] = []
    for first, last, types in sorted(batches, key=lambda b: b[0]):
        if first > last or len(types) != 1 or types[0] != ACCEPT:
            return None
        if spans and first <= spans[-1][1]:
            return None  # overlapping: the per-offset path refuses it
        if spans and first == spans[-1][1] + 1:
            spans[-1][1] = last
        else:
            spans.append([first, last])
    out: list[Run] = []
    for first, last in spans:
        offset = first
        while offset <= last:
            run = runs.get(offset)
            if run is None or run.member_id != member_id or run.last > last:
                return None
            out.append(run)
            offset = run.last + 1
    return out


def accept(
    accepted: list[Run],
    runs: dict[int, Run],
    recs: dict[int, Rec],
    changes: dict[int, Rec],
    unlock: Callable[[int, int], None],
    start: int,
) -> int:
    """ACCEPT of whole runs by their owner (`accepted_runs`): they go ACKNOWLEDGED, unlocked
    once per run; one at the SPSO `start` is passed at once (what the SPSO walk would do over
    them), the others become ACKNOWLEDGED records (and `changes`). The new SPSO."""
    for run in sorted(accepted, key=lambda r: r.first):
        del runs[run.first]
        unlock(run.lock, run.last - run.first + 1)
        if run.first == start:
            start = run.last + 1
            continue
        for offset in range(run.first, run.last + 1):
            recs[offset] = changes[offset] = Rec(ACKNOWLEDGED, 1)
    return start

"""A share partition keeps new records acquired together as one Run (core.share.inflight)
until something other than an ACCEPT of whole runs by their owner touches them. Differentially:
the same operations on two partitions, one of which turns its runs into per-offset records after
every step (the representation before runs), answer the same and persist the same."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.core.share.inflight import materialize
from coordinator.core.share.partition import (
    AcknowledgeType,
    AcquireMode,
    RecordState,
    SharePartition,
    SharePartitionConfig,
)

CONFIG = SharePartitionConfig(
    record_lock_duration_ms=1000, delivery_count_limit=3, max_record_locks=60
)
BATCH = 5
MEMBERS = ("m1", "m2")

acquire_op = st.tuples(
    st.just("acquire"), st.sampled_from(MEMBERS), st.integers(1, 4), st.integers(1, 25),
    st.booleans(), st.booleans(), st.booleans(),
)  # fmt: skip
ACK_TYPES = [AcknowledgeType.ACCEPT] * 5 + list(AcknowledgeType)  # mostly what a consumer sends
ack_op = st.tuples(
    st.just("ack"), st.sampled_from(MEMBERS), st.sampled_from(ACK_TYPES),
    st.sampled_from(["ranges", "one", "merged", "part", "other"]), st.integers(0, 3),
    st.sampled_from([False] * 4 + [True]),
)  # fmt: skip
other_op = st.one_of(
    st.tuples(st.just("tick"), st.integers(1, 1200)),
    st.tuples(st.just("leave"), st.sampled_from(MEMBERS)),
    st.tuples(st.just("log_start"), st.integers(1, 4)),
    st.tuples(st.just("snapshot")),
)
ops = st.lists(
    st.one_of(acquire_op, ack_op, st.tuples(acquire_op, ack_op), other_op), max_size=40
).map(lambda xs: [s for x in xs for s in (poll(*x) if isinstance(x[0], tuple) else (x,))])
# (an acquire and an acknowledgement together: a member's poll and its acknowledgement)


def poll(acquire: tuple, ack: tuple) -> tuple[tuple, tuple]:  # type: ignore[type-arg]
    """A member's acquire and its own acknowledgement right after."""
    return acquire, (ack[0], acquire[1], *ack[2:])


def acks_for(
    ranges: list[tuple[int, int]], kind: str, ack: int, pick: int
) -> list[tuple[int, int, list[int]]]:
    """Acknowledgement batches over `ranges` (a member's AcquiredRecords, as answered), shaped
    as clients send them: one per range, only one range, ranges merged, or part of one."""
    if not ranges:
        return []
    chosen = ranges[pick % len(ranges)]
    if kind == "ranges":
        return [(f, last, [ack]) for f, last in ranges]
    if kind == "one":
        return [(chosen[0], chosen[1], [ack])]
    if kind == "merged":
        return [(ranges[0][0], ranges[-1][1], [ack])]
    if kind == "part":  # a partial acknowledgement: per-offset types, the first one different
        first, last = chosen
        return [(first, last, [ack] + [AcknowledgeType.ACCEPT] * (last - first))]
    return [(chosen[0], chosen[0], [ack])]


def holds(p: SharePartition, offset: int, member: str) -> bool:
    found = p.record(offset)
    return found is not None and found[0] is RecordState.ACQUIRED and found[2] == member


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_runs_answer_and_persist_as_per_offset_records(steps: list[tuple]) -> None:  # type: ignore[type-arg]
    fast, slow = SharePartition(CONFIG), SharePartition(CONFIG)
    delivered: dict[str, list[tuple[int, int]]] = {m: [] for m in MEMBERS}
    now, log_start = 0, 0
    for step in steps:
        results = []
        for p in (fast, slow):
            if step[0] == "acquire":
                _, member, batches, max_records, record_limit, abort, at_end = step
                offset = max(p.next_fetch_offset(), log_start)
                base = offset - offset % BATCH
                fetched = [(b, b + BATCH - 1) for b in range(base, base + batches * BATCH, BATCH)]
                got = p.acquire(
                    member, fetched, now, max_records=max_records, batch_size=BATCH,
                    mode=AcquireMode.RECORD_LIMIT if record_limit else AcquireMode.BATCH_OPTIMIZED,
                    fetch_offset=None if at_end else offset,
                    aborted=[(base + 1, base + 1)] if abort else [],
                )  # fmt: skip
                results.append(got)
            elif step[0] == "ack":
                _, member, ack, kind, pick, theirs = step
                owner = next(m for m in MEMBERS if m != member) if theirs else member
                batches = acks_for(delivered[owner], kind, int(ack), pick)
                results.append(p.acknowledge(member, batches, now))
            elif step[0] == "tick":
                results.append(p.expire(now + step[1]))
            elif step[0] == "leave":
                results.append(p.release_member(step[1]))
            elif step[0] == "log_start":
                results.append(p.advance_start_offset(max(log_start, p.start_offset) + step[1]))
            else:
                results.append(p.take_snapshot())
            materialize(slow._recs, slow._runs)  # the per-offset representation, always
            assert not slow._runs
        assert results[0] == results[1], step
        assert fast.snapshot() == slow.snapshot(), step
        assert fast.next_fetch_offset() == slow.next_fetch_offset()
        assert fast.next_deadline() == slow.next_deadline()
        assert fast.delivery_complete_count() == slow.delivery_complete_count()
        if step[0] == "tick":
            now += step[1]
        elif step[0] == "log_start":
            log_start = max(log_start, fast.start_offset)
        elif step[0] == "acquire":
            for r in results[0].records:
                delivered[step[1]].append((r.first_offset, r.last_offset))
        for member in MEMBERS:  # what each member still holds, as it would know it
            delivered[member] = [r for r in delivered[member] if holds(slow, r[0], member)]
    for offset in range(fast.start_offset, fast.end_offset + 1):
        assert fast.record(offset) == slow.record(offset)


def test_an_accept_of_whole_runs_keeps_no_record_per_offset() -> None:
    """The fast path is taken: 500 records acquired and accepted leave no per-offset state."""
    p = SharePartition(SharePartitionConfig())
    got = p.acquire("m", [(0, 499)], 0, max_records=500)
    assert [(r.first_offset, r.last_offset) for r in got.records] == [(0, 499)]
    assert len(p._recs) == 0 and len(p._runs) == 1
    done = p.acknowledge("m", [(0, 499, [int(AcknowledgeType.ACCEPT)])], 1)
    assert done.error == 0 and done.update is not None and done.update.start_offset == 500
    assert p.start_offset == 500 and not p._recs and not p._runs
    assert p.next_deadline() is None

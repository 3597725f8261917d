"""Synthetic history for benchmarks and tests: a plausible stream of group events, written with the
real segment writer and codec (so the audit reads exactly what a coordinator would write).

The stream: `groups` groups, each with a few members; at each step one group gets a commit
summary (most steps), a member joining, a member leaving or expiring, or a topic change; every
membership or topic change is followed by a full rebalance (started, join phase, completed).
Deterministic for a given seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

from storage.history import FieldValue, Kind, encode_fields
from storage.history_log import HistoryLog

START_MS = 1_735_689_600_000  # 2025-01-01T00:00:00Z

Row = tuple[int, str, Kind, tuple[FieldValue, ...]]


def synthetic_rows(events: int, *, groups: int = 50, seed: int = 7) -> Iterator[Row]:
    rng = random.Random(seed)
    now = START_MS
    members: dict[str, list[tuple[str, str]]] = {f"group-{g:04d}": [] for g in range(groups)}
    generation = dict.fromkeys(members, 0)
    names = list(members)
    serial = 0
    emitted = 0
    for gid in names:
        yield (now, gid, Kind.GROUP_CREATED, ())
        emitted += 1
    while emitted < events:
        now += rng.randint(1, 2_000)
        gid = rng.choice(names)
        group = members[gid]
        roll = rng.random()
        batch: list[Row] = []
        if roll < 0.6 and group:
            batch.append((now, gid, Kind.OFFSETS_COMMITTED, (rng.randint(1, 60), 12, 60_000)))
        else:
            if roll < 0.8 or len(group) < 2:
                serial += 1
                client = f"client-{rng.randint(0, 99):02d}"
                member = (f"{client}-{serial:08x}", client)
                group.append(member)
                host = f"/10.0.{rng.randint(0, 9)}.{rng.randint(1, 250)}"
                batch.append((now, gid, Kind.MEMBER_JOINED, (member[0], None, client, host)))
                cause, trigger = "member_joined", (member[0], None, client, host, ())
            elif roll < 0.95:
                member = group.pop(rng.randrange(len(group)))
                reason = "left" if rng.random() < 0.7 else "expired"
                fields = (member[0], None, member[1], "/10.0.0.1", reason)
                batch.append((now, gid, Kind.MEMBER_LEFT, fields))
                cause = "member_left" if reason == "left" else "session_expired"
                trigger = (member[0], None, member[1], "/10.0.0.1", ())  # who left
            else:
                batch.append((now, gid, Kind.METADATA_CHANGED, (("orders",),)))
                cause, trigger = "metadata_changed", (None, None, "", "", ("orders",))
            batch.append((now, gid, Kind.REBALANCE_STARTED, (cause, *trigger)))
            join_ms = rng.randint(5, 3_000)
            total_ms = join_ms + rng.randint(1, 500)
            generation[gid] += 1
            gen = generation[gid]
            size = len(group)
            leader = group[0][0] if group else None
            batch.append(
                (now + join_ms, gid, Kind.JOIN_PHASE_COMPLETED, (gen, "range", size, join_ms))
            )
            fields = (gen, "range", leader, size, cause, join_ms, total_ms, *trigger)
            batch.append((now + total_ms, gid, Kind.REBALANCE_COMPLETED, fields))
            now += total_ms
        for row in batch:
            yield row
            emitted += 1
            if emitted >= events:
                return


def write_synthetic(
    directory: Path,
    events: int,
    *,
    groups: int = 50,
    seed: int = 7,
    segment_bytes: int = 4 << 20,
) -> str:
    """Write `events` synthetic events into a history dir; returns its coordinator id."""
    log = HistoryLog(
        directory,
        retention_ms=2**62,
        retention_bytes=2**62,
        segment_bytes=segment_bytes,
        roll_ms=2**62,
    )
    chunk: list[tuple[int, bytes, bytes]] = []
    for ts, gid, kind, fields in synthetic_rows(events, groups=groups, seed=seed):
        chunk.append((ts, gid.encode(), encode_fields(kind, fields)))
        if len(chunk) >= 10_000:
            log.append(chunk)
            chunk = []
    log.append(chunk)
    log.close()
    return log.coordinator_id

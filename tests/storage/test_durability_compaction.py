"""Issue 3, "Compaction", at the coordinator level: a long run of commits over a small key set
(with group churn: members joining and leaving, offsets and groups deleted, offsets expiring)
goes through DiskJournal onto a DiskLog with small segments and background compaction, as the
runtime does. The log stays bounded, tombstones past their retention are dropped, and loading the
compacted log (a restart) gives the full durable state of the live core: every group's
generation, protocol, leader and assignments, and every committed offset.
"""

from __future__ import annotations

import random
from pathlib import Path

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.record_codec import encode_record
from coordinator.serve.journal import DiskJournal
from storage.disk import DiskLog
from storage.entry import encode_entry
from tests.core.test_group_properties import durable_view
from tests.support.fakeclock import EPOCH, Harness, subscription

SEGMENT_BYTES = 8 * 1024
TOMBSTONE_RETENTION_MS = 60_000
GROUPS = ("g0", "g1", "g2", "g3")


async def test_long_run_stays_bounded_and_reloads_the_full_state(tmp_path: Path) -> None:
    rng = random.Random(3)
    h = Harness(
        CoordinatorConfig(
            initial_rebalance_delay_ms=0,
            offsets_retention_ms=600_000,
            offsets_retention_check_interval_ms=60_000,
        )
    )
    log = await DiskLog.open(
        tmp_path,
        segment_bytes=SEGMENT_BYTES,
        delete_retention_ms=TOMBSTONE_RETENTION_MS,
        clock_ms=lambda: EPOCH + h.now,
    )
    journal = DiskJournal(log)
    written = written_bytes = 0
    members: dict[str, tuple[list[str], int]] = {}  # group -> (member ids, generation)
    peak = 0

    async def flush() -> None:
        nonlocal written, written_bytes, peak
        new = h.records[written:]
        written = len(h.records)
        if new:
            await journal.wait_durable(journal.append(new))
            written_bytes += sum(len(encode_entry(0, 0, *encode_record(r))) for r in new)
        peak = max(peak, log.size_bytes())

    for step in range(3_000):
        group = rng.choice(GROUPS)
        roll = rng.random()
        if roll < 0.80:  # the bulk: commits to a few partitions
            parts = {("orders", rng.randrange(4)): step for _ in range(rng.randint(1, 3))}
            if group in members and rng.random() < 0.5:
                ids, gen = members[group]
                h.commit(group, parts, generation=gen, member_id=ids[0])
            else:
                h.commit(group, parts)
        elif roll < 0.88 and group not in members:
            snap = h.core.group(group)
            if snap is None or snap.state == "Empty":
                protocols = (("range", subscription(rng.choice(("orders", "payments")))),)
                ids, _, gen = h.stable_group(group, rng.randint(1, 3), protocols=protocols,
                                             session=1_800_000)  # fmt: skip
                members[group] = (ids, gen)
        elif roll < 0.94 and group in members:
            ids, _ = members.pop(group)
            h.leave(group, *((m, None) for m in ids))
        elif roll < 0.97:
            h.delete_offsets(group, {"orders": (0, 1)})
        elif group not in members:
            h.delete_groups(group)
        if step % 50 == 0:
            h.advance(rng.choice((1_000, 30_000, 120_000)))
            for group, (ids, gen) in members.items():
                for m in ids:
                    h.heartbeat(group, m, gen)
        await flush()

    await log.wait_compaction()
    await log.compact()
    await flush()
    assert log.compactions >= 10, log.compactions
    assert written_bytes > 30 * SEGMENT_BYTES
    assert peak < 12 * SEGMENT_BYTES, (peak, written_bytes)
    assert log.size_bytes() < 2 * SEGMENT_BYTES, log.size_bytes()
    await log.close()

    # A restart: load the compacted log into a fresh core.
    log = await DiskLog.open(tmp_path, auto_compact=False)
    fresh = GroupCoordinator(h.config, h.catalog, h.new_id, EPOCH)
    await DiskJournal(log).load(fresh)
    fresh.finish_loading(h.now)
    await log.close()
    live, in_flight, live_offsets = durable_view(h.core)
    loaded, _, loaded_offsets = durable_view(fresh)
    assert not in_flight
    assert loaded_offsets == live_offsets
    assert loaded == live
    assert live_offsets and any(view[5] for view in live.values())  # groups with members too

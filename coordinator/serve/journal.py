"""The coordinator's records on the durable log: the runtime's Journal over storage.DiskLog.

Appends encode each record (core.record_codec) and hand them to the log, which never blocks
the loop; `wait_durable` resolves after the fsync that covers them. `load` replays the log into a
core at start-up. Sequence numbers are the log's entry offsets.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable

from coordinator.core.coordinator import GroupCoordinator
from coordinator.core.record_batch import BatchReplayer
from coordinator.core.record_codec import encode_record
from coordinator.core.records import Record
from storage.disk import DiskLog

log = logging.getLogger("groupcoord.journal")


class DiskJournal:
    def __init__(self, disk: DiskLog) -> None:
        self.disk = disk

    def append(self, records: list[Record]) -> int:
        return self.disk.append([encode_record(r) for r in records])

    def durable_seq(self) -> int:
        return self.disk.durable_offset

    def last_seq(self) -> int:
        return self.disk.next_offset - 1

    async def wait_durable(self, seq: int) -> None:
        await self.disk.wait_durable(seq)

    def on_durable(self, listener: Callable[[int], None]) -> None:
        self.disk.on_durable = listener

    def lost(self, seq: int) -> bool:
        # After a failed write nothing past the durable offset will become durable (the disk
        # refuses appends until `recover`, which reloads the core).
        return seq > self.disk.durable_offset

    @property
    def healthy(self) -> bool:
        return self.disk.healthy

    async def recover(self) -> None:
        """After a failed write: retry the disk with backoff (0.1 s doubling to 5 s) until it
        takes appends again."""
        delay = 0.1
        while True:
            try:
                await self.disk.recover()
                return
            except Exception as exc:
                log.error("log still unavailable (%s); retrying in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def load(self, core: GroupCoordinator, batch_entries: int = 10_000) -> int:
        """Replay every record into `core`, yielding to the loop between batches so the server
        keeps answering (group APIs with COORDINATOR_LOAD_IN_PROGRESS) while it loads.

        The cyclic garbage collector is paused meanwhile: loading allocates millions of objects
        that form no cycles, and each collection would walk the whole growing state again (about
        40% of the loading time, measured). Afterwards what was loaded is frozen (gc.freeze):
        it is long-lived, and otherwise every full collection walks all of it again -- a pause
        of about half a second per million offsets (measured) while serving. What the state
        drops later is freed by reference counting all the same; only reference cycles among
        frozen objects would outlive it, and the core's records and groups form none. A reload
        (after a disk failure) unfreezes first, so the state it replaces can be collected."""
        await self.disk.wait_compaction()
        replayer = BatchReplayer(core)
        collecting = gc.isenabled()
        gc.unfreeze()
        gc.disable()
        try:
            async for keys, values in self.disk.replay_kv_batches(batch_entries):
                replayer.replay_batch(keys, values)
                await asyncio.sleep(0)
        finally:
            gc.freeze()
            if collecting:
                gc.enable()
        report = self.disk.load_report
        if replayer.skipped:
            log.warning("skipped %d records of unknown type", replayer.skipped)
        if report.damages:
            log.error(
                "the log had %d damaged region(s) (%d bytes); the entries in them were lost: %s",
                len(report.damages),
                report.damaged_bytes,
                ", ".join(f"{name}@{d.position}+{d.length_bytes}" for name, d in report.damages),
            )
        if report.truncated_tail_bytes:
            log.warning("cut a torn tail of %d bytes", report.truncated_tail_bytes)
        return replayer.applied

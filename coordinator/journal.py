"""The coordinator's records on the durable log: the runtime's Journal over storage.DiskLog.

Appends encode each record (coordinator.record_codec) and hand them to the log, which never blocks
the loop; `wait_durable` resolves after the fsync that covers them. `load` replays the log into a
core at start-up. Sequence numbers are the log's entry offsets.
"""

from __future__ import annotations

import asyncio
import logging

from coordinator.core import GroupCoordinator
from coordinator.record_codec import decode_record, encode_record
from coordinator.records import Record
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

    @property
    def healthy(self) -> bool:
        return self.disk.healthy

    async def load(self, core: GroupCoordinator, batch_entries: int = 10_000) -> int:
        """Replay every record into `core`, yielding to the loop between batches so the server
        keeps answering (group APIs with COORDINATOR_LOAD_IN_PROGRESS) while it loads."""
        await self.disk.wait_compaction()
        count = skipped = 0
        async for batch in self.disk.replay_batches(batch_entries):
            for entry in batch:
                record = decode_record(entry.key, entry.value)
                if record is None:  # an unknown record type: Kafka skips it with a warning
                    skipped += 1
                    continue
                core.replay(record)
                count += 1
            await asyncio.sleep(0)
        report = self.disk.load_report
        if skipped:
            log.warning("skipped %d records of unknown type", skipped)
        if report.damages:
            log.error(
                "the log had %d damaged region(s) (%d bytes); the entries in them were lost: %s",
                len(report.damages),
                report.damaged_bytes,
                ", ".join(f"{name}@{d.position}+{d.length_bytes}" for name, d in report.damages),
            )
        if report.truncated_tail_bytes:
            log.warning("cut a torn tail of %d bytes", report.truncated_tail_bytes)
        return count

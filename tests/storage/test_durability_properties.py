"""Issue 3's property test: for random sequences of records, replay(log) equals the live state,
including across compaction.

The rule-based machine of tests/core/test_group_properties.py drives the whole core (joins, syncs,
heartbeats, leaves, commits, deletions, expiry on a fake clock) and already checks that replaying
its records rebuilds the durable state. Here every step's records additionally go the way they go
on disk -- encoded (record_codec), framed as log entries, compacted (latest value per key; once
with every tombstone kept, once with every tombstone past the retention window dropped) -- and are
loaded back through the start-up path (EntryReader.kv_batches + BatchReplayer) into a fresh core,
which must hold the same durable state as the live one. The uncompacted log is loaded the same
way too (the start-up path's table cache meets tombstones between values of one key there).
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.stateful import invariant

from coordinator.core.coordinator import GroupCoordinator
from coordinator.core.record_batch import BatchReplayer
from coordinator.core.record_codec import encode_record
from storage.compaction import compact_entries
from storage.entry import Entry, EntryReader, encode_entry
from tests.core.test_group_properties import CoordinatorMachine, durable_view
from tests.support.fakeclock import EPOCH

RETENTION_MS = 1_000


def load(entries: list[Entry], machine: CoordinatorMachine) -> GroupCoordinator:
    """What start-up does with a segment holding these entries."""
    h = machine.h
    core = GroupCoordinator(h.config, h.catalog, h.new_id, EPOCH)
    blob = b"".join(encode_entry(*e) for e in entries)
    replayer = BatchReplayer(core)
    for keys, values in EntryReader(blob).kv_batches(7):
        replayer.replay_batch(keys, values)
    core.finish_loading(h.now)
    return core


class CompactedLogMachine(CoordinatorMachine):
    @invariant()
    def loading_the_compacted_log_gives_the_same_durable_state(self) -> None:
        # Each record's entry is stamped with its log offset as "time": compaction at now = 0
        # keeps every tombstone, at a far future drops them all with what they deleted.
        entries = [Entry(i, i, *encode_record(record)) for i, record in enumerate(self.h.records)]
        live, in_flight, live_offsets = durable_view(self.h.core)
        compacted = [
            compact_entries(entries, now_ms, RETENTION_MS)[0]
            for now_ms in (0, len(entries) + 10 * RETENTION_MS)
        ]
        for log in (entries, *compacted):
            loaded, _, loaded_offsets = durable_view(load(log, self))
            assert loaded_offsets == live_offsets
            assert {k: v for k, v in loaded.items() if k not in in_flight} == live


TestCompactedLogMachine = CompactedLogMachine.TestCase
TestCompactedLogMachine.settings = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

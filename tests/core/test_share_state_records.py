"""The share partitions' state record (type 104): bytes round trip, replay into the core, and
what replay restores (never an acquisition: a restart delivers acquired records again)."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coordinator.core.coordinator import GroupCoordinator
from coordinator.core.effects import CoordinatorConfig
from coordinator.core.record_codec import decode_record, encode_record
from coordinator.core.record_wire import RecordDecodeError
from coordinator.core.records import Record
from coordinator.core.share.partition import SharePartition
from coordinator.core.share.persisted import RecordState, ShareSnapshot, StateBatch
from coordinator.core.share.state_records import (
    SharePartitionStateKey,
    SharePartitionStateValue,
    record_of,
)
from coordinator.core.share.values import SharePartitionConfig
from coordinator.core.topics import TopicCatalog

TOPIC = uuid.UUID(int=7)


def _batches() -> st.SearchStrategy[tuple[StateBatch, ...]]:
    spans = st.lists(st.tuples(st.integers(0, 50), st.sampled_from(
        [RecordState.AVAILABLE, RecordState.ACKNOWLEDGED, RecordState.ARCHIVED]),
        st.integers(0, 9)), max_size=6)

    def build(items: list[tuple[int, RecordState, int]]) -> tuple[StateBatch, ...]:
        out, first = [], 100
        for length, state, count in items:
            out.append(StateBatch(first, first + length, state, count))
            first += length + 1
        return tuple(out)

    return spans.map(build)


@given(group=st.text(max_size=20), partition=st.integers(0, 2**31 - 1), batches=_batches(),
       epoch=st.integers(0, 2**31 - 1))
def test_round_trip(group: str, partition: int, batches: tuple[StateBatch, ...],
                    epoch: int) -> None:
    start = batches[0].first_offset if batches else 100
    complete = sum(b.last_offset - b.first_offset + 1 for b in batches
                   if b.delivery_state.terminal)
    snapshot = ShareSnapshot(epoch, 0, 0, start, complete, batches)
    record = Record(SharePartitionStateKey(group, TOPIC, partition),
                    SharePartitionStateValue(snapshot))
    key, value = encode_record(record)
    assert decode_record(key, value) == record
    assert decode_record(key, None) == Record(record.key, None)


def test_a_cut_value_is_refused() -> None:
    part = SharePartition(SharePartitionConfig(), 5)
    key, value = encode_record(Record(*record_of(("g", TOPIC, 0), part)))
    assert value is not None
    with pytest.raises(RecordDecodeError):
        decode_record(key, value[:-1] + b"\x00\x00")


def test_replay_restores_the_partition_without_its_locks() -> None:
    live = SharePartition(SharePartitionConfig(), 10)
    live.acquire("m1", [(10, 19)], 0, max_records=100)
    live.acknowledge("m1", [(10, 12, [1]), (13, 13, [3])], 0)  # accept 10-12, reject 13
    key, value = encode_record(Record(*record_of(("g", TOPIC, 3), live)))

    core = GroupCoordinator(CoordinatorConfig(), TopicCatalog(), lambda prefix: f"{prefix}-1")
    core.replay(decode_record(key, value))  # type: ignore[arg-type]
    core.finish_loading(0)
    restored = core.share.partitions[("g", TOPIC, 3)]
    assert restored.start_offset == 14  # 10-13 are done
    assert restored.next_fetch_offset() == 14  # 14-19 were acquired: delivered again
    assert restored.acquired_by("m1") == []

    core.replay(Record(SharePartitionStateKey("g", TOPIC, 3), None))
    assert ("g", TOPIC, 3) not in core.share.partitions

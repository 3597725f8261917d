"""The loading fast path after a group's tombstone, pinned (issue 28, `make mutation`).

A group's tombstone removes the group but not its offsets (they are records of their own); an
offset replayed after it re-creates the group, as record-by-record replay does. The fast path
keeps (group, topic) tables between records, so it must not skip that step: the state a batch
replay builds equals the state of replaying the records one by one.
"""

from __future__ import annotations

import pytest

from coordinator.core.record_batch import BatchReplayer
from coordinator.core.record_codec import encode_record
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
)
from tests.storage.test_loading import full_state, new_core, one_by_one


def offset(p: int, value: int) -> tuple[bytes, bytes | None]:
    return encode_record(
        Record(OffsetCommitKey("g", "orders", p), OffsetCommitValue(value, 0, "", 100, None))
    )


@pytest.mark.parametrize("batch", [1, 100])
def test_an_offset_after_its_groups_tombstone_re_creates_the_group(batch: int) -> None:
    member = MemberMetadata("m1", None, "c", "/h", 30_000, 10_000, b"s", b"a")
    group = GroupMetadataValue("consumer", 1, "range", "m1", 5, (member,))
    kvs = [
        offset(0, 1),  # caches g/orders' table
        encode_record(Record(GroupMetadataKey("g"), group)),
        offset(1, 2),
        encode_record(Record(GroupMetadataKey("g"), None)),  # the group is deleted
        offset(2, 3),  # a commit by a simple consumer after it: the group exists again
    ]
    core = new_core()
    replayer = BatchReplayer(core)
    for start in range(0, len(kvs), batch):
        chunk = kvs[start : start + batch]
        replayer.replay_batch([k for k, _ in chunk], [v for _, v in chunk])
    assert full_state(core) == full_state(one_by_one(kvs))
    snapshot = core.group("g")
    assert snapshot is not None and snapshot.state == "Empty" and not snapshot.members
    assert sorted(core.committed_offsets("g")) == [("orders", 0), ("orders", 1), ("orders", 2)]

"""`groupcoord log dump`: decoded records, damage and torn tails shown, nothing modified."""

from __future__ import annotations

from pathlib import Path

from coordinator.core.record_codec import encode_record
from coordinator.core.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
)
from coordinator.tools.dump import dump
from storage.compaction import segment_name
from storage.disk import DiskLog


async def test_dump_decodes_records_and_shows_damage(tmp_path: Path) -> None:
    member = MemberMetadata("m-1", None, "client", "/127.0.0.1", 300_000, 45_000, b"s", b"a")
    records = [
        Record(
            GroupMetadataKey("g"), GroupMetadataValue("consumer", 3, "range", "m-1", 5, (member,))
        ),
        Record(OffsetCommitKey("g", "t", 0), OffsetCommitValue(42, 1, "", 7, None)),
        Record(OffsetCommitKey("g", "t", 1), None),
    ]
    log = await DiskLog.open(tmp_path)
    for r in records:
        await log.append_durable([encode_record(r)])
    await log.append_durable([(b"\x00\x63junk", b"?")])  # unknown record type
    await log.close()
    seg = tmp_path / segment_name(0)
    data = seg.read_bytes()
    lines = list(dump(tmp_path))
    text = "\n".join(lines)
    assert "generation_id=3" in text and "member_id='m-1'" in text
    assert "offset=42 leader_epoch=1" in text
    assert "payload: <DELETED>" in text
    assert "unknown record type" in text
    assert lines[-1] == "entries: 4 damaged_regions: 0"

    damaged = bytearray(data)
    damaged[60] ^= 0xFF
    seg.write_bytes(bytes(damaged) + b"GCe\x01torn")
    text = "\n".join(dump(tmp_path))
    assert "DAMAGED position: 0" in text
    assert "TORN TAIL" in text
    assert seg.read_bytes() == bytes(damaged) + b"GCe\x01torn"  # read-only

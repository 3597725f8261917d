"""Loading a batch of durable records into the core, fast (docs/protocol.md §12.3).

`BatchReplayer` decodes records with `core.record_codec` and applies them to a `ReplayTarget`
(the GroupCoordinator) in log order. Almost every record of a log is an OffsetCommit v3 value,
so those take a fused path that builds the value object through its slots; it turns itself off
(everything still loads, slower) if the record shapes change.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from typing import Any, Protocol

from coordinator.core import record_codec
from coordinator.core.records import GroupMetadataKey, OffsetCommitKey, OffsetCommitValue, Record

_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_HQIH = struct.Struct(">hqih")  # OffsetCommitValue v3 up to its metadata's length


class ReplayTarget(Protocol):
    """What `BatchReplayer` loads into: GroupCoordinator."""

    def replay(self, record: Record) -> None: ...

    def loading_partitions(self, group_id: str, topic: str) -> dict[int, OffsetCommitValue]: ...


class BatchReplayer:
    """Decode records and apply them to a target in log order, a batch of entries at a time.

    Almost every record of a log is an OffsetCommit v3 value, so those take a fused path: no
    Record or key object is built; the value goes straight into the (group, topic) partition table
    that `target.loading_partitions` handed out for that key prefix, which is exactly what
    `target.replay` would do with it. Every other record (group metadata, tombstones, older value
    versions, types added later) goes through `decode_record` and `target.replay`. A cached table
    may be dropped from the target by a tombstone (an emptied table, a deleted group that the next
    offset must re-create), so any record other than a group or offset value clears the cache.

    Errors are those of `decode_record`: an unknown type is skipped and counted, a known type that
    does not decode raises RecordDecodeError.
    """

    __slots__ = ("_tables", "applied", "skipped", "target")

    def __init__(self, target: ReplayTarget) -> None:
        self.target = target
        self._tables: dict[bytes, dict[int, OffsetCommitValue]] = {}
        self.applied = 0
        self.skipped = 0

    def replay_batch(self, keys: list[bytes], values: list[bytes | None]) -> None:
        tables = self._tables
        find_table = tables.get
        unpack_bare, unpack_head = _OFFSET_V3_BARE.unpack_from, _HQIH.unpack_from
        unpack_q, unpack_i = _Q.unpack_from, _I.unpack_from
        head_size, bare = _HQIH.size, record_codec.OFFSET_V3_FIXED_BYTES
        new, builder, frozen = object.__new__, _OffsetValueBuilder, OffsetCommitValue
        slow = self._replay_one
        skipped = self.skipped
        if not _FAST_PATH:
            tables.clear()  # every lookup misses: the general path for all
        for key, value in zip(keys, values, strict=True):
            table = find_table(key[:-4])
            if table is not None and value is not None:
                n = len(value)
                if n == bare:  # no metadata, the usual commit: one unpack
                    version, offset, leader_epoch, meta_len, commit_ts = unpack_bare(value)
                    metadata: str | None = "" if meta_len == 0 else None
                elif n > bare:  # pragma: no mutate (`>=` is equivalent: n == bare is taken above)
                    version, offset, leader_epoch, meta_len = unpack_head(value)
                    metadata = None
                    if n == bare + meta_len:
                        (commit_ts,) = unpack_q(value, head_size + meta_len)
                        try:
                            metadata = value[head_size : head_size + meta_len].decode()
                        except UnicodeDecodeError:
                            metadata = None  # the general path reports it
                else:
                    metadata = None
                if metadata is not None and version == 3:
                    v = new(builder)
                    v.offset = offset
                    v.leader_epoch = leader_epoch
                    v.metadata = metadata
                    v.commit_timestamp_ms = commit_ts
                    v.expire_timestamp_ms = None
                    v.__class__ = frozen  # type: ignore[assignment]
                    table[unpack_i(key, len(key) - 4)[0]] = v  # type: ignore[assignment]
                    continue
            if not slow(key, value):
                skipped += 1
        self.applied += len(keys) - (skipped - self.skipped)
        self.skipped = skipped

    def _replay_one(self, key: bytes, value: bytes | None) -> bool:
        """The general path; False when the record's type is unknown (skipped)."""
        record = record_codec.decode_record(key, value)
        if record is None:
            return False
        k, v = record.key, record.value
        if type(k) is OffsetCommitKey and type(v) is OffsetCommitValue:
            table = self.target.loading_partitions(k.group_id, k.topic)
            table[k.partition] = v
            if _FAST_PATH:
                self._tables[key[:-4]] = table
            return True
        self.target.replay(record)
        if v is None or type(k) is not GroupMetadataKey:
            self._tables.clear()
        return True


class _OffsetValueBuilder:
    """OffsetCommitValue's slots, writable: the loading path fills one in and turns it into an
    OffsetCommitValue by assigning `__class__`, which CPython allows between classes of the same
    slot layout. The frozen dataclass's own __init__ goes through object.__setattr__ per field;
    this builds the same object (equal, hashable, frozen) in under half the time. Building the
    value was the largest single cost of loading an offset (§12.3 wants loading fast)."""

    __slots__ = record_codec.OFFSET_VALUE_FIELDS
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp_ms: int
    expire_timestamp_ms: int | None


def _builder_works() -> bool:
    """The fused path is on only if the record shapes are the ones it builds, and the class
    switch gives exactly what the constructor gives."""
    if (
        not record_codec.shapes_unchanged()
        or OffsetCommitValue.__slots__ != record_codec.OFFSET_VALUE_FIELDS
    ):
        return False
    v: Any = object.__new__(_OffsetValueBuilder)
    v.offset, v.leader_epoch, v.metadata = 7, 3, "m"
    v.commit_timestamp_ms, v.expire_timestamp_ms = 11, None
    try:
        v.__class__ = OffsetCommitValue
    except TypeError:  # never on CPython: the mutants of this branch are equivalent there
        return False  # pragma: no mutate
    want = OffsetCommitValue(7, 3, "m", 11, None)
    # Each condition holds on CPython, so and/or mutants of this line are equivalent there.
    return type(v) is OffsetCommitValue and v == want and hash(v) == hash(want)  # pragma: no mutate


_OFFSET_V3_BARE = struct.Struct(">hqihq")  # OffsetCommitValue v3 with empty metadata
_FAST_PATH = _builder_works()

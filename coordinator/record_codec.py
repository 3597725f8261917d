"""Byte encoding of coordinator records, modelled on Kafka's `__consumer_offsets` (reference §12.1).

Key   = int16 record type, then the key fields (Kafka's v0, non-flexible layout):
        1 OffsetCommit: group string, topic string, partition int32
        2 GroupMetadata: group string
        0 LegacyOffsetCommit is read as type 1, as Kafka's loader does.
Value = int16 value version, then the fields at that version. A tombstone is a key with no value.

Strings are int16 length + UTF-8 (-1 = null); bytes are int32 length + data; arrays int32 count.

Versions written:
- OffsetCommitValue v3 (offset, leaderEpoch, metadata, commitTimestamp), or v1 when the commit has
  an explicit expireTimestamp. v1 has no leaderEpoch, so it is stored as -1 -- Kafka does the
  same, and such commits (request v2-4) never carry a leader epoch.
- GroupMetadataValue v3 (Kafka's written version) while metadata_hash is 0; otherwise
  GROUPCOORD_GROUP_V100 = the v3 layout followed by int64 metadata_hash. Versions >= 100 are
  groupcoord's own, so a Kafka reader fails loudly on them instead of misreading them.
Versions read: OffsetCommitValue v0-v3, GroupMetadataValue v0-v3 and v100. To add a field, add a
new version here (decoders keep every old one) and write the new one.

Loading rules (§12.1): an unknown record type is skipped (`decode_record` returns None, the caller
warns); a known type with an unknown value version raises RecordDecodeError (loading fails).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields

from coordinator.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    RecordKey,
    RecordValue,
)

LEGACY_OFFSET_COMMIT_TYPE = 0
OFFSET_COMMIT_TYPE = 1
GROUP_METADATA_TYPE = 2
GROUPCOORD_GROUP_V100 = 100

_H = struct.Struct(">h")
_I = struct.Struct(">i")
_Q = struct.Struct(">q")
_HQ = struct.Struct(">hq")
_HQI = struct.Struct(">hqi")
_QQ = struct.Struct(">qq")
_II = struct.Struct(">ii")
_OFFSET_TYPE_PREFIX = _H.pack(OFFSET_COMMIT_TYPE)
_GROUP_TYPE_PREFIX = _H.pack(GROUP_METADATA_TYPE)
_NULL_STRING = _H.pack(-1)
_HQIH = struct.Struct(">hqih")
_OFFSET_V3_FIXED_BYTES = _HQIH.size + 8


class RecordDecodeError(ValueError):
    """A known record type whose bytes cannot be decoded (unknown version, truncated)."""


# -- encoding ------------------------------------------------------------------------------------

_string_cache: dict[str, bytes] = {}


def _string(s: str) -> bytes:
    """int16 length + UTF-8. Group ids and topics repeat on every commit, so they are cached."""
    b = _string_cache.get(s)
    if b is None:
        data = s.encode()
        if len(data) > 0x7FFF:
            raise ValueError("string longer than 32767 bytes")
        b = _H.pack(len(data)) + data
        if len(_string_cache) > 65_536:
            _string_cache.clear()
        _string_cache[s] = b
    return b


def _nullable_string(s: str | None) -> bytes:
    return _NULL_STRING if s is None else _string(s)


def _bytes(b: bytes) -> bytes:
    return _I.pack(len(b)) + b


def encode_key(key: RecordKey) -> bytes:
    if type(key) is OffsetCommitKey:
        return b"".join(
            (_OFFSET_TYPE_PREFIX, _string(key.group_id), _string(key.topic), _I.pack(key.partition))
        )
    if type(key) is GroupMetadataKey:
        return _GROUP_TYPE_PREFIX + _string(key.group_id)
    raise TypeError(f"not a record key: {key!r}")


def encode_value(value: RecordValue) -> bytes:
    if type(value) is OffsetCommitValue:
        return _encode_offset_value(value)
    if type(value) is GroupMetadataValue:
        return _encode_group_value(value)
    raise TypeError(f"not a record value: {value!r}")


def _encode_offset_value(v: OffsetCommitValue) -> bytes:
    meta = v.metadata.encode()
    if v.expire_timestamp_ms is None:  # v3
        return b"".join(
            (_HQI.pack(3, v.offset, v.leader_epoch), _H.pack(len(meta)), meta,
             _Q.pack(v.commit_timestamp_ms))
        )  # fmt: skip
    return b"".join(  # v1
        (_HQ.pack(1, v.offset), _H.pack(len(meta)), meta,
         _QQ.pack(v.commit_timestamp_ms, v.expire_timestamp_ms))
    )  # fmt: skip


def _encode_group_value(v: GroupMetadataValue) -> bytes:
    version = 3 if v.metadata_hash == 0 else GROUPCOORD_GROUP_V100
    parts = [
        _H.pack(version),
        _string(v.protocol_type),
        _I.pack(v.generation_id),
        _nullable_string(v.protocol_name),
        _nullable_string(v.leader),
        _Q.pack(v.current_state_timestamp_ms),
        _I.pack(len(v.members)),
    ]
    for m in v.members:
        parts += (
            _string(m.member_id),
            _nullable_string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            _II.pack(m.rebalance_timeout_ms, m.session_timeout_ms),
            _bytes(m.subscription),
            _bytes(m.assignment),
        )
    if version == GROUPCOORD_GROUP_V100:
        parts.append(_Q.pack(v.metadata_hash))
    return b"".join(parts)


def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes or None for a tombstone): what `storage` appends."""
    value = None if record.value is None else encode_value(record.value)
    return encode_key(record.key), value


# -- decoding ------------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf = buf
        self.pos = pos

    def _take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise RecordDecodeError("truncated record")
        data = self.buf[self.pos : end]
        self.pos = end
        return data

    def int16(self) -> int:
        v: int = _H.unpack(self._take(2))[0]
        return v

    def int32(self) -> int:
        v: int = _I.unpack(self._take(4))[0]
        return v

    def int64(self) -> int:
        v: int = _Q.unpack(self._take(8))[0]
        return v

    def nullable_string(self) -> str | None:
        n = self.int16()
        if n == -1:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as e:
            raise RecordDecodeError(str(e)) from e

    def string(self) -> str:
        s = self.nullable_string()
        if s is None:
            raise RecordDecodeError("null where a string is required")
        return s

    def bytes_(self) -> bytes:
        return self._take(self.int32())

    def done(self) -> None:
        if self.pos != len(self.buf):
            raise RecordDecodeError(f"{len(self.buf) - self.pos} trailing bytes")


def record_type(key: bytes) -> int:
    if len(key) < 2:
        raise RecordDecodeError("key shorter than its record type")
    t: int = _H.unpack_from(key)[0]
    return t


def decode_key(key: bytes) -> RecordKey | None:
    """The key, or None for a record type this coordinator does not know (skip it, §12.1)."""
    t = record_type(key)
    if t in (OFFSET_COMMIT_TYPE, LEGACY_OFFSET_COMMIT_TYPE):
        r = _Reader(key, 2)
        k: RecordKey = OffsetCommitKey(r.string(), r.string(), r.int32())
    elif t == GROUP_METADATA_TYPE:
        r = _Reader(key, 2)
        k = GroupMetadataKey(r.string())
    else:
        return None
    r.done()
    return k


def decode_offset_value(value: bytes) -> OffsetCommitValue:
    r = _Reader(value, 0)
    version = r.int16()
    if version not in (0, 1, 2, 3):
        raise RecordDecodeError(f"unknown OffsetCommitValue version {version}")
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else -1
    metadata = r.string()
    commit_ts = r.int64()
    expire_ts = r.int64() if version == 1 else None
    r.done()
    return OffsetCommitValue(offset, leader_epoch, metadata, commit_ts, expire_ts)


def decode_group_value(value: bytes) -> GroupMetadataValue:
    r = _Reader(value, 0)
    version = r.int16()
    if version not in (0, 1, 2, 3, GROUPCOORD_GROUP_V100):
        raise RecordDecodeError(f"unknown GroupMetadataValue version {version}")
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    state_ts = r.int64() if version >= 2 else -1
    count = r.int32()
    if count < 0 or count > len(value):
        raise RecordDecodeError(f"bad member count {count}")
    members = []
    for _ in range(count):
        member_id = r.string()
        instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        if version == 0:  # v0 has none; Kafka uses the session timeout (§12.3)
            rebalance_timeout = session_timeout
        members.append(
            MemberMetadata(
                member_id, instance_id, client_id, client_host, rebalance_timeout,
                session_timeout, r.bytes_(), r.bytes_(),
            )
        )  # fmt: skip
    metadata_hash = r.int64() if version == GROUPCOORD_GROUP_V100 else 0
    r.done()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, state_ts, tuple(members), metadata_hash
    )


def decode_record(key: bytes, value: bytes | None) -> Record | None:
    """The record, or None when its type is unknown (the caller skips it with a warning)."""
    if value is not None and key[:2] == _OFFSET_TYPE_PREFIX:
        fast = _fast_offset_record(key, value)
        if fast is not None:
            return fast
    k = decode_key(key)
    if k is None:
        return None
    if value is None:
        return Record(k, None)
    if type(k) is OffsetCommitKey:
        return Record(k, decode_offset_value(value))
    return Record(k, decode_group_value(value))


# -- the loading fast path -----------------------------------------------------------------------
# Loading speed is dominated by building frozen dataclasses (their __init__ goes through
# object.__setattr__ per field). The offset-commit record is by far the most common, so it is built
# through the slot descriptors directly -- the same objects, about three times faster. If the record
# shapes change (a field is added), `_builder` falls back to the class's own __init__.


_OFFSET_KEY_FIELDS = ("group_id", "topic", "partition")
_OFFSET_VALUE_FIELDS = (
    "offset", "leader_epoch", "metadata", "commit_timestamp_ms", "expire_timestamp_ms"
)  # fmt: skip


def _shapes_unchanged() -> bool:
    return (
        tuple(f.name for f in fields(OffsetCommitKey)) == _OFFSET_KEY_FIELDS
        and tuple(f.name for f in fields(OffsetCommitValue)) == _OFFSET_VALUE_FIELDS
        and tuple(f.name for f in fields(Record)) == ("key", "value")
    )


def _make_fast_decoder() -> Callable[[bytes, bytes], Record | None]:
    """Build `_fast_offset_record` with every lookup bound locally (this is the hot loop)."""
    new = object.__new__
    k1, k2, k3 = (getattr(OffsetCommitKey, n).__set__ for n in _OFFSET_KEY_FIELDS)
    v1, v2, v3, v4, v5 = (getattr(OffsetCommitValue, n).__set__ for n in _OFFSET_VALUE_FIELDS)
    r1, r2 = (getattr(Record, n).__set__ for n in ("key", "value"))
    unpack_head, unpack_q, unpack_i = _HQIH.unpack_from, _Q.unpack_from, _I.unpack_from
    head_size, fixed = _HQIH.size, _OFFSET_V3_FIXED_BYTES
    cache = _prefix_cache
    fast = _shapes_unchanged()

    def decode(key: bytes, value: bytes) -> Record | None:
        """A type-1 key with a v3 value, or None to take the general path (it reports errors)."""
        if len(value) < fixed or len(key) < 10:
            return None
        version, offset, leader_epoch, meta_len = unpack_head(value)
        if version != 3 or meta_len < 0 or len(value) != fixed + meta_len:
            return None
        prefix = key[2:-4]
        pair = cache.get(prefix)
        if pair is None:
            pair = _group_and_topic(prefix)
            if pair is None:
                return None
        if meta_len:
            try:
                metadata = value[head_size : head_size + meta_len].decode()
            except UnicodeDecodeError:
                return None
        else:
            metadata = ""
        (commit_ts,) = unpack_q(value, head_size + meta_len)
        (partition,) = unpack_i(key, len(key) - 4)
        if not fast:
            return Record(
                OffsetCommitKey(pair[0], pair[1], partition),
                OffsetCommitValue(offset, leader_epoch, metadata, commit_ts, None),
            )
        k = new(OffsetCommitKey)
        k1(k, pair[0])
        k2(k, pair[1])
        k3(k, partition)
        v = new(OffsetCommitValue)
        v1(v, offset)
        v2(v, leader_epoch)
        v3(v, metadata)
        v4(v, commit_ts)
        v5(v, None)
        rec: Record = new(Record)
        r1(rec, k)
        r2(rec, v)
        return rec

    return decode


_prefix_cache: dict[bytes, tuple[str, str]] = {}


def _group_and_topic(prefix: bytes) -> tuple[str, str] | None:
    """Decode the (group, topic) strings that make up a whole key prefix, cached."""
    cached = _prefix_cache.get(prefix)
    if cached is not None:
        return cached
    try:
        r = _Reader(prefix, 0)
        pair = (r.string(), r.string())
        r.done()
    except RecordDecodeError:
        return None
    if len(_prefix_cache) > 65_536:
        _prefix_cache.clear()
    _prefix_cache[prefix] = pair
    return pair


_fast_offset_record = _make_fast_decoder()

"""Byte encoding of coordinator records, modelled on Kafka's `__consumer_offsets`
(docs/protocol.md §12.1).

Key   = int16 record type, then the key fields (Kafka's v0, non-flexible layout):
        1 OffsetCommit: group string, topic string, partition int32
        2 GroupMetadata: group string
        0 LegacyOffsetCommit is read as type 1, as Kafka's loader does.
        100 Topic (groupcoord's own; types >= 100 are never Kafka's): name string
        101 Acl (groupcoord's own): resource type int8, resource name string, pattern type
            int8, principal string, host string, operation int8, permission int8
        102 ScramCredential (groupcoord's own): user string, mechanism int8
        103 TxnOffset (groupcoord's own, issue 29): group string, topic string, partition
            int32, producer id int64, seq int64
        104 SharePartitionState (groupcoord's own, KIP-932): coordinator.core.share.state_records
        105 GroupConfig (groupcoord's own): a group's configs, coordinator.core.share.group_configs
        3-8, 16 the KIP-848 consumer-group records (issue 23), Kafka's keys and flexible v0
            values byte for byte: coordinator.core.consumer.codec.
        10-14 the KIP-932 share-group records, the same way: coordinator.core.share.records.
Value = int16 value version, then the fields at that version. A tombstone is a key with no value.

Strings are int16 length + UTF-8 (-1 = null); bytes are int32 length + data; arrays int32 count.

Versions written:
- OffsetCommitValue v3 (offset, leaderEpoch, metadata, commitTimestamp), or v1 when the commit has
  an explicit expireTimestamp. v1 has no leaderEpoch, so it is stored as -1 -- Kafka does the
  same, and such commits (request v2-4) never carry a leader epoch.
- GroupMetadataValue v3 (Kafka's written version) while metadata_hash is 0; otherwise
  GROUPCOORD_GROUP_V100 = the v3 layout followed by int64 metadata_hash. Versions >= 100 are
  groupcoord's own, so a Kafka reader fails loudly on them instead of misreading them.
- TopicValue v0: topic id (16 bytes), partitions int32, then int32 count of rack entries (0 =
  racks unknown, else one per partition), each an array of rack strings.
- AclValue v0: nothing after the version. ScramCredentialValue v0: salt, stored key, server
  key (bytes each), iterations int32.
- TxnOffsetValue v0: transactional id string, producer epoch int16, offset int64, leader epoch
  int32, metadata string, commit timestamp int64.
- The consumer-group values (types 3-8, 16) and share-group values (10-14): v0, Kafka's only
  version.
Versions read: OffsetCommitValue v0-v3, GroupMetadataValue v0-v3 and v100, TopicValue v0,
AclValue v0, ScramCredentialValue v0, TxnOffsetValue v0. To add
a field, add a new version here (decoders keep every old one) and write the new one.

Loading rules (§12.1): an unknown record type is skipped (`decode_record` returns None, the caller
warns); a known type with an unknown value version raises RecordDecodeError (loading fails).

Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
import typing
from collections.abc import Callable
from dataclasses import fields

from coordinator.core.consumer import codec as consumer_codec
from coordinator.core.consumer.records import RECORD_TYPES as CONSUMER_KEY_TYPES
from coordinator.core.consumer.records import ConsumerGroupKey, ConsumerGroupValue
from coordinator.core.record_wire import (
    NULL_STRING,
    B,
    H,
    I,
    Q,
    RecordDecodeError,
    string_cache,
)
from coordinator.core.record_wire import Reader as _Reader
from coordinator.core.record_wire import bytes_at as _bytes_at
from coordinator.core.record_wire import encode_bytes as _bytes
from coordinator.core.record_wire import encode_nullable_string as _nullable_string
from coordinator.core.record_wire import encode_string as _string
from coordinator.core.record_wire import encode_string_once as _string_once
from coordinator.core.record_wire import text_at as _text_at
from coordinator.core.records import (
    AclKey,
    AclValue,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    Record,
    RecordKey,
    RecordValue,
    ScramCredentialKey,
    ScramCredentialValue,
    TopicKey,
    TopicValue,
    TxnOffsetKey,
    TxnOffsetValue,
)
from coordinator.core.share import group_configs, state_records
from coordinator.core.share import records as share_codec
from coordinator.core.share.group_configs import GroupConfigKey, GroupConfigValue
from coordinator.core.share.state_records import SharePartitionStateKey, SharePartitionStateValue

LEGACY_OFFSET_COMMIT_TYPE = 0
OFFSET_COMMIT_TYPE = 1
GROUP_METADATA_TYPE = 2
GROUPCOORD_GROUP_V100 = 100
TOPIC_TYPE = 100
ACL_TYPE = 101
SCRAM_CREDENTIAL_TYPE = 102
TXN_OFFSET_TYPE = 103

_H, _I, _Q, _B, _NULL_STRING = H, I, Q, B, NULL_STRING
_string_cache = string_cache  # encode_string's cache (tests clear it)
_HQ = struct.Struct(">hq")
_HQI = struct.Struct(">hqi")
_QQ = struct.Struct(">qq")
_II = struct.Struct(">ii")
_OFFSET_TYPE_PREFIX = _H.pack(OFFSET_COMMIT_TYPE)
_GROUP_TYPE_PREFIX = _H.pack(GROUP_METADATA_TYPE)
_TOPIC_TYPE_PREFIX = _H.pack(TOPIC_TYPE)
_HQIH = struct.Struct(">hqih")
OFFSET_V3_FIXED_BYTES = _HQIH.size + 8


_CONSUMER_KEY_CLASSES = typing.get_args(ConsumerGroupKey)
_CONSUMER_VALUE_TYPES = typing.get_args(ConsumerGroupValue)
_SHARE_KEY_CLASSES = typing.get_args(share_codec.ShareGroupKey)
_SHARE_VALUE_TYPES = typing.get_args(share_codec.ShareGroupValue)


# -- encoding ------------------------------------------------------------------------------------


def encode_key(key: RecordKey) -> bytes:
    if type(key) is OffsetCommitKey:
        return b"".join(
            (_OFFSET_TYPE_PREFIX, _string(key.group_id), _string(key.topic), _I.pack(key.partition))
        )
    if type(key) is GroupMetadataKey:
        return _GROUP_TYPE_PREFIX + _string(key.group_id)
    if type(key) is TopicKey:
        return _TOPIC_TYPE_PREFIX + _string(key.name)
    if type(key) is AclKey:
        return b"".join(
            (_H.pack(ACL_TYPE), _B.pack(key.resource_type), _string_once(key.resource_name),
             _B.pack(key.pattern_type), _string_once(key.principal), _string_once(key.host),
             _B.pack(key.operation), _B.pack(key.permission))
        )  # fmt: skip
    if type(key) is ScramCredentialKey:
        return _H.pack(SCRAM_CREDENTIAL_TYPE) + _string_once(key.user) + _B.pack(key.mechanism)
    if type(key) is TxnOffsetKey:
        return b"".join(
            (_H.pack(TXN_OFFSET_TYPE), _string(key.group_id), _string(key.topic),
             _I.pack(key.partition), _QQ.pack(key.producer_id, key.seq))
        )  # fmt: skip
    if isinstance(key, _CONSUMER_KEY_CLASSES):
        return consumer_codec.encode_key(key)
    if isinstance(key, _SHARE_KEY_CLASSES):
        return share_codec.encode_key(key)
    if type(key) is SharePartitionStateKey:
        return state_records.encode_key(key)
    if type(key) is GroupConfigKey:
        return group_configs.encode_key(key)
    raise TypeError(f"not a record key: {key!r}")


def encode_value(value: RecordValue) -> bytes:
    if type(value) is OffsetCommitValue:
        return _encode_offset_value(value)
    if type(value) is GroupMetadataValue:
        return _encode_group_value(value)
    if type(value) is TopicValue:
        return _encode_topic_value(value)
    if type(value) is AclValue:
        return _H.pack(0)
    if type(value) is ScramCredentialValue:
        return b"".join(
            (_H.pack(0), _bytes(value.salt), _bytes(value.stored_key), _bytes(value.server_key),
             _I.pack(value.iterations))
        )  # fmt: skip
    if type(value) is TxnOffsetValue:
        return b"".join(
            (_H.pack(0), _string_once(value.transactional_id), _H.pack(value.producer_epoch),
             _Q.pack(value.offset), _I.pack(value.leader_epoch), _string_once(value.metadata),
             _Q.pack(value.commit_timestamp_ms))
        )  # fmt: skip
    if isinstance(value, _CONSUMER_VALUE_TYPES):
        return consumer_codec.encode_value(value)
    if isinstance(value, _SHARE_VALUE_TYPES):
        return share_codec.encode_value(value)
    if type(value) is SharePartitionStateValue:
        return state_records.encode_value(value)
    if type(value) is GroupConfigValue:
        return group_configs.encode_value(value)
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
        _NULL_STRING if v.leader is None else _string_once(v.leader),
        _Q.pack(v.current_state_timestamp_ms),
        _I.pack(len(v.members)),
    ]
    for m in v.members:
        parts += (
            _string_once(m.member_id),
            _NULL_STRING if m.group_instance_id is None else _string_once(m.group_instance_id),
            _string_once(m.client_id),
            _string(m.client_host),
            _II.pack(m.rebalance_timeout_ms, m.session_timeout_ms),
            _bytes(m.subscription),
            _bytes(m.assignment),
        )
    if version == GROUPCOORD_GROUP_V100:
        parts.append(_Q.pack(v.metadata_hash))
    return b"".join(parts)


def _encode_topic_value(v: TopicValue) -> bytes:
    if len(v.topic_id) != 16:
        raise ValueError("a topic id is 16 bytes")
    parts = [_H.pack(0), v.topic_id, _II.pack(v.partitions, len(v.racks))]
    for racks in v.racks:
        parts.append(_I.pack(len(racks)))
        parts.extend(_string(r) for r in racks)
    return b"".join(parts)


def encode_record(record: Record) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes or None for a tombstone): what `storage` appends."""
    value = None if record.value is None else encode_value(record.value)
    return encode_key(record.key), value


# -- decoding ------------------------------------------------------------------------------------


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
    elif t == TOPIC_TYPE:
        r = _Reader(key, 2)
        k = TopicKey(r.string())
    elif t == ACL_TYPE:
        r = _Reader(key, 2)
        k = AclKey(r.int8(), r.string(), r.int8(), r.string(), r.string(), r.int8(), r.int8())
    elif t == SCRAM_CREDENTIAL_TYPE:
        r = _Reader(key, 2)
        k = ScramCredentialKey(r.string(), r.int8())
    elif t == TXN_OFFSET_TYPE:
        r = _Reader(key, 2)
        k = TxnOffsetKey(r.string(), r.string(), r.int32(), r.int64(), r.int64())
    elif t in consumer_codec.CONSUMER_RECORD_TYPES:
        try:
            return consumer_codec.decode_key(t, key)
        except consumer_codec.ConsumerCodecError as e:
            raise RecordDecodeError(str(e)) from e
    elif t in share_codec.SHARE_RECORD_TYPES:  # KIP-932 share groups
        try:
            return share_codec.decode_key(t, key)
        except (consumer_codec.ConsumerCodecError, ValueError) as e:
            raise RecordDecodeError(str(e)) from e
    elif t == state_records.SHARE_PARTITION_STATE_TYPE:  # KIP-932 share partitions' state
        return state_records.decode_key(key)
    elif t == group_configs.GROUP_CONFIG_TYPE:  # a group's configs
        return group_configs.decode_key(key)
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
    try:
        return _decode_group_value(value)
    except (struct.error, UnicodeDecodeError) as e:  # a fixed-size field ran past the end
        raise RecordDecodeError(f"bad GroupMetadataValue: {e}") from e


def _decode_group_value(buf: bytes) -> GroupMetadataValue:
    """Struct reads at explicit positions (the fields are read once each, in order); a short
    buffer raises struct.error, which `decode_group_value` reports as RecordDecodeError."""
    (version,) = _H.unpack_from(buf)
    if version not in (0, 1, 2, 3, GROUPCOORD_GROUP_V100):
        raise RecordDecodeError(f"unknown GroupMetadataValue version {version}")
    protocol_type, pos = _text_at(buf, 2)
    (generation,) = _I.unpack_from(buf, pos)
    protocol, pos = _text_at(buf, pos + 4)
    leader, pos = _text_at(buf, pos)
    state_ts = -1
    if version >= 2:
        (state_ts,) = _Q.unpack_from(buf, pos)
        pos += 8
    (count,) = _I.unpack_from(buf, pos)
    pos += 4
    # `count >= len(buf)` is an equivalent mutant: a member takes more than one byte, so a count
    # equal to the length is as impossible as a larger one, and the member reads refuse it.
    if protocol_type is None or count < 0 or count > len(buf):  # pragma: no mutate
        raise RecordDecodeError(f"bad group value: protocol type {protocol_type}, {count} members")
    members = []
    for _ in range(count):
        member_id, pos = _text_at(buf, pos)
        instance_id = None
        if version >= 3:
            instance_id, pos = _text_at(buf, pos)
        client_id, pos = _text_at(buf, pos)
        client_host, pos = _text_at(buf, pos)
        if version >= 1:
            rebalance_timeout, session_timeout = _II.unpack_from(buf, pos)
            pos += 8
        else:  # v0 has none; Kafka uses the session timeout (§12.3)
            (session_timeout,) = _I.unpack_from(buf, pos)
            rebalance_timeout = session_timeout
            pos += 4
        subscription, pos = _bytes_at(buf, pos)
        assignment, pos = _bytes_at(buf, pos)
        if member_id is None or client_id is None or client_host is None:
            raise RecordDecodeError("null where a string is required")
        members.append(
            MemberMetadata(
                member_id, instance_id, client_id, client_host, rebalance_timeout,
                session_timeout, subscription, assignment,
            )
        )  # fmt: skip
    metadata_hash = 0
    if version == GROUPCOORD_GROUP_V100:
        (metadata_hash,) = _Q.unpack_from(buf, pos)
        pos += 8
    if pos != len(buf):
        raise RecordDecodeError(f"{len(buf) - pos} trailing bytes")
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, state_ts, tuple(members), metadata_hash
    )


def decode_topic_value(value: bytes) -> TopicValue:
    r = _Reader(value, 0)
    version = r.int16()
    if version != 0:
        raise RecordDecodeError(f"unknown TopicValue version {version}")
    topic_id = r._take(16)
    partitions = r.int32()
    count = r.int32()
    if partitions < 0 or count not in (0, partitions):
        raise RecordDecodeError(f"bad topic value: {partitions} partitions, {count} rack entries")
    racks = []
    for _ in range(count):
        n = r.int32()
        # `n >= len(value)` is an equivalent mutant: a rack string takes two bytes or more, so
        # n equal to the length is as impossible as a larger one, and the string reads refuse it.
        if n < 0 or n > len(value):  # pragma: no mutate
            raise RecordDecodeError(f"bad rack count {n}")
        racks.append(tuple(r.string() for _ in range(n)))
    r.done()
    return TopicValue(topic_id, partitions, tuple(racks))


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
    if type(k) is TopicKey:
        return Record(k, decode_topic_value(value))
    if type(k) is AclKey:
        return Record(k, decode_acl_value(value))
    if type(k) is ScramCredentialKey:
        return Record(k, decode_scram_credential_value(value))
    if type(k) is TxnOffsetKey:
        return Record(k, decode_txn_offset_value(value))
    if type(k) in CONSUMER_KEY_TYPES:
        try:
            return Record(k, consumer_codec.decode_value(k, value))  # type: ignore[arg-type]
        except consumer_codec.ConsumerCodecError as e:
            raise RecordDecodeError(str(e)) from e
    if type(k) in share_codec.RECORD_TYPES:
        try:
            return Record(k, share_codec.decode_value(k, value))  # type: ignore[arg-type]
        except (consumer_codec.ConsumerCodecError, ValueError) as e:
            raise RecordDecodeError(str(e)) from e
    if type(k) is SharePartitionStateKey:
        return Record(k, state_records.decode_value(value))
    if type(k) is GroupConfigKey:
        return Record(k, group_configs.decode_value(value))
    return Record(k, decode_group_value(value))


def decode_txn_offset_value(value: bytes) -> TxnOffsetValue:
    r = _Reader(value, 0)
    version = r.int16()
    if version != 0:
        raise RecordDecodeError(f"unknown TxnOffsetValue version {version}")
    pending = TxnOffsetValue(r.string(), r.int16(), r.int64(), r.int32(), r.string(), r.int64())
    r.done()
    return pending


def decode_acl_value(value: bytes) -> AclValue:
    r = _Reader(value, 0)
    version = r.int16()
    if version != 0:
        raise RecordDecodeError(f"unknown AclValue version {version}")
    r.done()
    return AclValue()


def decode_scram_credential_value(value: bytes) -> ScramCredentialValue:
    r = _Reader(value, 0)
    version = r.int16()
    if version != 0:
        raise RecordDecodeError(f"unknown ScramCredentialValue version {version}")
    credential = ScramCredentialValue(r.bytes_(), r.bytes_(), r.bytes_(), r.int32())
    r.done()
    return credential


# -- the loading fast path -----------------------------------------------------------------------
# Loading speed is dominated by building frozen dataclasses (their __init__ goes through
# object.__setattr__ per field). The offset-commit record is by far the most common, so it is built
# through the slot descriptors directly -- the same objects, about three times faster. If the record
# shapes change (a field is added), `_builder` falls back to the class's own __init__.


OFFSET_KEY_FIELDS = ("group_id", "topic", "partition")
OFFSET_VALUE_FIELDS = (
    "offset", "leader_epoch", "metadata", "commit_timestamp_ms", "expire_timestamp_ms"
)  # fmt: skip


def shapes_unchanged() -> bool:
    return (
        tuple(f.name for f in fields(OffsetCommitKey)) == OFFSET_KEY_FIELDS
        and tuple(f.name for f in fields(OffsetCommitValue)) == OFFSET_VALUE_FIELDS
        and tuple(f.name for f in fields(Record)) == ("key", "value")
    )


def _make_fast_decoder() -> Callable[[bytes, bytes], Record | None]:
    """Build `_fast_offset_record` with every lookup bound locally (this is the hot loop)."""
    new = object.__new__
    k1, k2, k3 = (getattr(OffsetCommitKey, n).__set__ for n in OFFSET_KEY_FIELDS)
    v1, v2, v3, v4, v5 = (getattr(OffsetCommitValue, n).__set__ for n in OFFSET_VALUE_FIELDS)
    r1, r2 = (getattr(Record, n).__set__ for n in ("key", "value"))
    unpack_head, unpack_q, unpack_i = _HQIH.unpack_from, _Q.unpack_from, _I.unpack_from
    head_size, fixed = _HQIH.size, OFFSET_V3_FIXED_BYTES
    cache = _prefix_cache
    # A falsy `fast` is an equivalent mutant: the constructors build the same records, slower.
    fast = shapes_unchanged()  # pragma: no mutate

    def decode(key: bytes, value: bytes) -> Record | None:
        """A type-1 key with a v3 value, or None to take the general path (it reports errors)."""
        if len(value) < fixed or len(key) < 10:
            return None
        version, offset, leader_epoch, meta_len = unpack_head(value)
        if version != 3 or meta_len < 0 or len(value) != fixed + meta_len:
            return None
        prefix = key[2:-4]
        # A miss here is an equivalent mutant: _group_and_topic gives the same pair, slower.
        pair = cache.get(prefix)  # pragma: no mutate
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
        # Inverting this test is an equivalent mutant while the shapes are unchanged (and `fast`
        # says whether they are): both branches build the same records.
        if not fast:  # pragma: no mutate
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
    # The no-mutate lines only run the cache, and their mutants are equivalent (a lookup that
    # misses, a pair not kept, a bound off by one): the same pair is decoded again.
    cached = _prefix_cache.get(prefix)  # pragma: no mutate
    if cached is not None:
        return cached
    try:
        r = _Reader(prefix, 0)
        pair = (r.string(), r.string())
        r.done()
    except RecordDecodeError:
        return None
    if len(_prefix_cache) > 65_536:  # pragma: no mutate
        _prefix_cache.clear()
    _prefix_cache[prefix] = pair  # pragma: no mutate
    return pair


_fast_offset_record = _make_fast_decoder()

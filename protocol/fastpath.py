"""Fast paths for the hottest APIs, Heartbeat and OffsetCommit: requests parsed and OffsetCommit
responses encoded without kio; and ConsumerGroupHeartbeat responses (KIP-848's every-member beat)
encoded without kio.

Heartbeats are most of a coordinator's traffic (every member, every `heartbeat.interval.ms`), so
their cost decides throughput. kio's decode is not the slow part; what this saves is the general
route around it: the frame buffer, the header object, the entity and the command adapter. The
response side reuses `codec.encode_heartbeat_response`'s precomputed bodies.

Invariants:
- `parse_heartbeat` and `parse_offset_commit` only ever accept what the general decoder would
  decode to the same fields (tests/protocol/test_fastpath.py checks this differentially, with
  Hypothesis, against kio). Anything they are not sure of -- another API, an unsupported version,
  tagged fields, a long compact string, a truncated or oddly encoded frame -- returns None, and
  the caller takes the general path, which owns every error and every close. The fast path
  never raises on bad input.
- Trailing bytes after the body are ignored, as Kafka's parser (and the general path) does.

Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Final, Generic, NamedTuple, Protocol, TypeVar

from .apis import (
    APIS,
    CONSUMER_GROUP_HEARTBEAT,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    SYNC_GROUP,
)

_SIZE_AND_HEADER: Final = struct.Struct(">ihhih")  # size, api key, version, correlation, client id
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_HEARTBEAT_MAX_VERSION: Final = 4  # v4 is flexible (KIP-482); v0-3 are not

HeartbeatFields = tuple[int, int, str, int, str, str | None]
"""(api_version, correlation_id, group_id, generation_id, member_id, group_instance_id)."""


def _header(
    data: bytes, max_frame_bytes: int, api_key: int, min_version: int, max_version: int
) -> tuple[int, int, int] | None:
    """The prologue every fast parser shares: `data` is one whole frame of `api_key` at a version
    the parser knows, within the frame limit. Returns (version, correlation id, client id length),
    or None to leave the frame to the general path."""
    if len(data) < _SIZE_AND_HEADER.size:
        return None
    size, key, version, correlation_id, client_id_len = _SIZE_AND_HEADER.unpack_from(data, 0)
    if (
        key != api_key
        or not min_version <= version <= max_version
        or size + 4 != len(data)
        or size > max_frame_bytes
        or client_id_len < -1
    ):
        return None
    return version, correlation_id, client_id_len


def parse_heartbeat(data: bytes, max_frame_bytes: int) -> HeartbeatFields | None:
    """`data` is exactly one size-prefixed frame as read from the socket (size included)."""
    header = _header(data, max_frame_bytes, HEARTBEAT, 0, _HEARTBEAT_MAX_VERSION)
    if header is None:
        return None
    version, correlation_id, client_id_len = header
    offset = _SIZE_AND_HEADER.size + max(client_id_len, 0)
    try:
        if version < _HEARTBEAT_MAX_VERSION:
            group_id, offset = _string(data, offset)
            (generation_id,) = _I32.unpack_from(data, offset)
            member_id, offset = _string(data, offset + 4)
            instance_id = None
            if version == 3:
                instance_id, offset = _nullable_string(data, offset)
        else:
            if data[offset] != 0:  # header tagged fields: leave them to the general path
                return None
            group_id, generation_id, member_id, instance_id, offset = _compact_member(
                data, offset + 1
            )
            if data[offset] != 0:  # body tagged fields
                return None
            offset += 1
    except (IndexError, struct.error, UnicodeDecodeError, _Unsure):
        return None
    if offset > len(data):
        return None
    return version, correlation_id, group_id, generation_id, member_id, instance_id


# -- ConsumerGroupHeartbeat requests (KIP-848) -------------------------------------------------
#
# ConsumerGroupHeartbeatRequest.json v0-v1 (flexible: header v2, compact fields): group_id,
# member_id, member_epoch int32, instance_id, rack_id, rebalance_timeout_ms int32,
# subscribed_topic_names (nullable array), subscribed_topic_regex (v1+), server_assignor,
# topic_partitions (nullable array of [topic_id uuid, [partition int32]]), tagged fields. Every
# consumer-protocol member sends one per heartbeat interval, most of them with nothing but its
# epoch and owned partitions; kio's reader and the adapter around it cost more than the core's
# work on such a beat.

_CONSUMER_HEARTBEAT_MAX_VERSION: Final = 1

ConsumerHeartbeatFields = tuple[
    int, int, str, str, str, int, str | None, str | None, int,
    tuple[str, ...] | None, str | None, str | None,
    tuple[tuple[bytes, tuple[int, ...]], ...] | None,
]  # fmt: skip
"""(api_version, correlation_id, client_id ("" when null), group_id, member_id, member_epoch,
instance_id, rack_id, rebalance_timeout_ms, subscribed_topic_names, subscribed_topic_regex (None
in v0), server_assignor, topic_partitions as (topic id's 16 bytes, partitions))."""


def parse_consumer_heartbeat(data: bytes, max_frame_bytes: int) -> ConsumerHeartbeatFields | None:
    """`data` is exactly one size-prefixed frame as read from the socket (size included)."""
    header = _header(
        data, max_frame_bytes, CONSUMER_GROUP_HEARTBEAT, 0, _CONSUMER_HEARTBEAT_MAX_VERSION
    )
    if header is None:
        return None
    version, correlation_id, client_id_len = header
    offset = _SIZE_AND_HEADER.size + max(client_id_len, 0)
    try:
        client_id = (
            decode_client_id(data[_SIZE_AND_HEADER.size : offset]) if client_id_len > 0 else ""
        )
        if data[offset] != 0:  # header tagged fields: leave them to the general path
            return None
        group_id, offset = _compact_string(data, offset + 1)
        member_id, offset = _compact_string(data, offset)
        (member_epoch,) = _I32.unpack_from(data, offset)
        instance_id, offset = _compact_nullable_string(data, offset + 4)
        rack_id, offset = _compact_nullable_string(data, offset)
        (rebalance_timeout_ms,) = _I32.unpack_from(data, offset)
        topic_names, offset = _compact_strings(data, offset + 4)
        regex = None
        if version >= 1:
            regex, offset = _compact_nullable_string(data, offset)
        server_assignor, offset = _compact_nullable_string(data, offset)
        owned, offset = _owned_partitions(data, offset)
        if data[offset] != 0:  # body tagged fields
            return None
        offset += 1
    except (IndexError, struct.error, UnicodeDecodeError, _Unsure):
        return None
    if offset > len(data):
        return None
    return (
        version, correlation_id, client_id, group_id, member_id, member_epoch, instance_id,
        rack_id, rebalance_timeout_ms, topic_names, regex, server_assignor, owned,
    )  # fmt: skip


def _compact_strings(data: bytes, offset: int) -> tuple[tuple[str, ...] | None, int]:
    if data[offset] == 0:
        return None, offset + 1
    n, offset = _compact_count(data, offset, 1)
    names = []
    for _ in range(n):
        name, offset = _compact_string(data, offset)
        names.append(name)
    return tuple(names), offset


def _owned_partitions(
    data: bytes, offset: int
) -> tuple[tuple[tuple[bytes, tuple[int, ...]], ...] | None, int]:
    if data[offset] == 0:
        return None, offset + 1
    n, offset = _compact_count(data, offset, 18)  # topic id, partitions, tagged fields
    owned = []
    for _ in range(n):
        topic_id = data[offset : offset + 16]
        n_parts, offset = _compact_count(data, offset + 16, 4)
        partitions = struct.unpack_from(f">{n_parts}i", data, offset)
        offset += 4 * n_parts
        if data[offset] != 0:  # topic tagged fields
            raise _Unsure
        owned.append((topic_id, partitions))
        offset += 1
    return tuple(owned), offset


# -- OffsetCommit requests ---------------------------------------------------------------------
#
# OffsetCommitRequest.json, v2-v9: group_id, generation_id_or_member_epoch int32, member_id,
# group_instance_id (nullable, v7+), retention_time_ms int64 (v2-v4), topics[name, partitions[
# partition_index int32, committed_offset int64, committed_leader_epoch int32 (v6+),
# committed_metadata (nullable)]]; flexible from v8 (request header v2, compact arrays and
# strings, tagged-field sections, which the fast path only accepts empty).

T = TypeVar("T")
P = TypeVar("P")
C = TypeVar("C")

_OFFSET_COMMIT_MIN_VERSION: Final = 2
_OFFSET_COMMIT_FLEXIBLE: Final = 8
_OFFSET_COMMIT_MAX_VERSION: Final = 9
_MAX_RETENTION_MS: Final = 1 << 55  # well inside kio's i64Timedelta (~8.6e16 ms)
_PARTITION_OFFSET: Final = struct.Struct(">iq")
_PARTITION_OFFSET_EPOCH: Final = struct.Struct(">iqi")


class OffsetCommitFields(NamedTuple, Generic[T]):
    """A parsed OffsetCommit request; `topics` are built by the caller's constructors."""

    version: int
    correlation_id: int
    client_id: str
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    retention_time_ms: int
    topics: tuple[T, ...]


MakeCommit = Callable[[int, int, str, str, int, str, str | None, int, tuple[T, ...]], C]
"""Takes OffsetCommitFields' fields, in its order (OffsetCommitFields itself is one)."""


def parse_offset_commit(
    data: bytes,
    max_frame_bytes: int,
    make_commit: MakeCommit[T, C],
    make_topic: Callable[[str, tuple[P, ...]], T],
    make_partition: Callable[[int, int, int, str | None], P],
) -> C | None:
    """`data` is exactly one size-prefixed frame as read from the socket (size included).
    The request is `make_commit(*fields)` (the fields of OffsetCommitFields), its topics
    `make_topic(name, partitions)`, partitions `make_partition(partition, offset, leader_epoch or
    -1, metadata)`: the caller's own types, built once."""
    header = _header(
        data, max_frame_bytes, OFFSET_COMMIT, _OFFSET_COMMIT_MIN_VERSION, _OFFSET_COMMIT_MAX_VERSION
    )
    if header is None:
        return None
    version, correlation_id, client_id_len = header
    offset = _SIZE_AND_HEADER.size
    end_client = offset + max(client_id_len, 0)
    try:
        client_id = decode_client_id(data[offset:end_client])
        offset = end_client
        if version >= _OFFSET_COMMIT_FLEXIBLE:
            if data[offset] != 0:  # header tagged fields: leave them to the general path
                return None
            group_id, generation_id, member_id, instance_id, offset = _compact_member(
                data, offset + 1
            )
            topics, offset = _commit_topics_compact(data, offset, make_topic, make_partition)
            if data[offset] != 0:  # request tagged fields
                return None
            offset += 1
            retention = -1
        else:
            group_id, offset = _string(data, offset)
            (generation_id,) = _I32.unpack_from(data, offset)
            member_id, offset = _string(data, offset + 4)
            instance_id = None
            if version >= 7:
                instance_id, offset = _nullable_string(data, offset)
            retention = -1
            if version <= 4:
                (retention,) = _I64.unpack_from(data, offset)
                offset += 8
                if not -_MAX_RETENTION_MS <= retention <= _MAX_RETENTION_MS:
                    return None  # beyond a timedelta: kio refuses it, so the general path does
            topics, offset = _commit_topics(data, offset, version, make_topic, make_partition)
    except (IndexError, struct.error, UnicodeDecodeError, _Unsure):
        return None
    if offset > len(data):
        return None
    return make_commit(
        version,
        correlation_id,
        client_id,
        group_id,
        generation_id,
        member_id,
        instance_id,
        retention,
        topics,
    )


def _count(data: bytes, offset: int, min_item_bytes: int) -> tuple[int, int]:
    """An int32 array length that the rest of the frame can hold (kio's reader would abort the
    process on a huge one; see protocol.guard)."""
    (n,) = _I32.unpack_from(data, offset)
    offset += 4
    if n < 0 or n * min_item_bytes > len(data) - offset:
        raise _Unsure
    return n, offset


def _compact_count(data: bytes, offset: int, min_item_bytes: int) -> tuple[int, int]:
    """A compact array length, one-byte varints only; a null array is left to the general path."""
    n = data[offset] - 1
    offset += 1
    if not 0 <= n < 127 or n * min_item_bytes > len(data) - offset:
        raise _Unsure
    return n, offset


def _commit_topics(
    data: bytes,
    offset: int,
    version: int,
    make_topic: Callable[[str, tuple[P, ...]], T],
    make_partition: Callable[[int, int, int, str | None], P],
) -> tuple[tuple[T, ...], int]:
    with_epoch = version >= 6
    fixed = _PARTITION_OFFSET_EPOCH if with_epoch else _PARTITION_OFFSET
    topics: list[T] = []
    n_topics, offset = _count(data, offset, 6)  # name length + partitions count
    for _ in range(n_topics):
        name, offset = _string(data, offset)
        n_parts, offset = _count(data, offset, fixed.size + 2)
        parts: list[P] = []
        for _ in range(n_parts):
            if with_epoch:
                partition, committed, epoch = _PARTITION_OFFSET_EPOCH.unpack_from(data, offset)
            else:
                partition, committed = _PARTITION_OFFSET.unpack_from(data, offset)
                epoch = -1
            metadata, offset = _nullable_string(data, offset + fixed.size)
            parts.append(make_partition(partition, committed, epoch, metadata))
        topics.append(make_topic(name, tuple(parts)))
    return tuple(topics), offset


def _commit_topics_compact(
    data: bytes,
    offset: int,
    make_topic: Callable[[str, tuple[P, ...]], T],
    make_partition: Callable[[int, int, int, str | None], P],
) -> tuple[tuple[T, ...], int]:
    topics: list[T] = []
    n_topics, offset = _compact_count(data, offset, 3)  # name, partitions, tagged fields
    for _ in range(n_topics):
        name, offset = _compact_string(data, offset)
        n_parts, offset = _compact_count(data, offset, _PARTITION_OFFSET_EPOCH.size + 2)
        parts: list[P] = []
        for _ in range(n_parts):
            partition, committed, epoch = _PARTITION_OFFSET_EPOCH.unpack_from(data, offset)
            metadata, offset = _compact_nullable_string(data, offset + _PARTITION_OFFSET_EPOCH.size)
            if data[offset] != 0:  # partition tagged fields
                raise _Unsure
            offset += 1
            parts.append(make_partition(partition, committed, epoch, metadata))
        if data[offset] != 0:  # topic tagged fields
            raise _Unsure
        offset += 1
        topics.append(make_topic(name, tuple(parts)))
    return tuple(topics), offset


def _compact_member(data: bytes, offset: int) -> tuple[str, int, str, str | None, int]:
    """The flexible versions' common start (Heartbeat v4, OffsetCommit v8+): group_id,
    generation_id, member_id, group_instance_id; and the offset after them."""
    group_id, offset = _compact_string(data, offset)
    (generation_id,) = _I32.unpack_from(data, offset)
    member_id, offset = _compact_string(data, offset + 4)
    instance_id, offset = _compact_nullable_string(data, offset)
    return group_id, generation_id, member_id, instance_id, offset


# Every request repeats its client's id: one str per distinct id, shared by every header that is
# kept (a parked request's), instead of a new one per request. Bounded: cleared when full.
_client_ids: dict[bytes, str] = {}
_CLIENT_IDS_MAX: Final = 16_384


def decode_client_id(raw: bytes) -> str:
    """A request header's client id. Java decodes with replacement characters rather than
    failing; so do we."""
    client_id = _client_ids.get(raw)
    if client_id is None:
        client_id = raw.decode("utf-8", "replace")
        if len(_client_ids) >= _CLIENT_IDS_MAX:
            _client_ids.clear()
        _client_ids[raw] = client_id
    return client_id


# The group APIs whose request body opens with the group id (OffsetCommit, JoinGroup, Heartbeat,
# LeaveGroup, SyncGroup and ConsumerGroupHeartbeat, every version: their JSON schemas' first field).
GROUP_FIRST: Final = frozenset(
    {OFFSET_COMMIT, JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP, CONSUMER_GROUP_HEARTBEAT}
)


# Each GROUP_FIRST API's (min version, max version, first flexible version or None).
_GROUP_FIRST_SPECS: Final = {
    key: (APIS[key].min_version, APIS[key].max_version, APIS[key].first_flexible)
    for key in GROUP_FIRST
}


def group_first(data: bytes) -> tuple[int, int, str] | None:
    """(api key, correlation id, group id) of one whole size-prefixed request frame `data` of a
    GROUP_FIRST API at a version we offer, read from the header and the body's first field alone
    (no header object, no client id string); None when it is anything else or when unsure
    (header tagged fields included): the caller takes the general path, which judges it."""
    if len(data) < _SIZE_AND_HEADER.size:
        return None
    size, key, version, correlation_id, client_id_len = _SIZE_AND_HEADER.unpack_from(data, 0)
    spec = _GROUP_FIRST_SPECS.get(key)
    if spec is None or size + 4 != len(data) or client_id_len < -1:
        return None
    low, high, first_flexible = spec
    if not low <= version <= high:
        return None
    offset = _SIZE_AND_HEADER.size + max(client_id_len, 0)
    try:
        if first_flexible is not None and version >= first_flexible:
            if data[offset] != 0:  # header tagged fields: the general path's
                return None
            group_id, _ = _compact_string(data, offset + 1)
        else:
            group_id, _ = _string(data, offset)
    except (_Unsure, struct.error, IndexError, UnicodeDecodeError):
        return None
    return key, correlation_id, group_id


class _Unsure(Exception):
    """Something the fast path does not decode itself; the general path will."""


def _string(data: bytes, offset: int) -> tuple[str, int]:
    (length,) = _I16.unpack_from(data, offset)
    start = offset + 2
    end = start + length
    if length < 0 or end > len(data):
        raise _Unsure
    return data[start:end].decode(), end


def _nullable_string(data: bytes, offset: int) -> tuple[str | None, int]:
    (length,) = _I16.unpack_from(data, offset)
    if length == -1:
        return None, offset + 2
    return _string(data, offset)


def _compact_string(data: bytes, offset: int) -> tuple[str, int]:
    # Compact strings store length + 1 as an unsigned varint; only the one-byte form is handled
    # here (strings under 127 bytes: every real group and member id).
    length = data[offset] - 1
    if not 0 <= length < 127:
        raise _Unsure
    start = offset + 1
    end = start + length
    if end > len(data):
        raise _Unsure
    return data[start:end].decode(), end


def _compact_nullable_string(data: bytes, offset: int) -> tuple[str | None, int]:
    if data[offset] == 0:
        return None, offset + 1
    return _compact_string(data, offset)


# -- OffsetCommit responses --------------------------------------------------------------------
#
# kio encodes in pure Python (~30 us for a one-partition OffsetCommit response, the largest part of
# a commit's cost), and commits are the second-hottest request. The layout is small and fixed
# (OffsetCommitResponse.json): [throttle_time_ms int32 (v3+)] topics[name, partitions[
# partition_index int32, error_code int16]], flexible from v8 (compact arrays and strings, empty
# tagged-field sections). tests/protocol/test_fastpath.py checks every version against kio's
# decoder.


class CommitPartitionError(Protocol):
    @property
    def partition(self) -> int: ...
    @property
    def error(self) -> int: ...


class CommitTopicErrors(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def partitions(self) -> Sequence[CommitPartitionError]: ...


_SIZE_AND_CORRELATION: Final = struct.Struct(">ii")
_PARTITION_ERROR: Final = struct.Struct(">ih")
_ZERO_THROTTLE: Final = b"\x00\x00\x00\x00"
_FLEXIBLE_PREFIX: Final = b"\x00" + _ZERO_THROTTLE


def offset_commit_response_frame(
    version: int, correlation_id: int, topics: Sequence[CommitTopicErrors]
) -> bytes:
    flexible = version >= _OFFSET_COMMIT_FLEXIBLE
    # throttle_time_ms from v3; flexible versions (v8+) first have the response header's tagged
    # fields (none)
    parts = [_FLEXIBLE_PREFIX if flexible else _ZERO_THROTTLE] if version >= 3 else []
    pack = _PARTITION_ERROR.pack
    if flexible:
        parts.append(_uvarint(len(topics) + 1))
        for topic in topics:
            parts.append(_topic_name(topic.name, True))
            partitions = topic.partitions
            parts.append(_uvarint(len(partitions) + 1))
            for p in partitions:
                parts.append(pack(p.partition, p.error))
                parts.append(b"\x00")  # partition tagged fields
            parts.append(b"\x00")  # topic tagged fields
        parts.append(b"\x00")  # response tagged fields
    else:
        parts.append(_I32.pack(len(topics)))
        for topic in topics:
            parts.append(_topic_name(topic.name, False))
            partitions = topic.partitions
            parts.append(_I32.pack(len(partitions)))
            parts.extend([pack(p.partition, p.error) for p in partitions])
    body = b"".join(parts)
    return _SIZE_AND_CORRELATION.pack(len(body) + 4, correlation_id) + body


# -- ConsumerGroupHeartbeat responses ----------------------------------------------------------
#
# ConsumerGroupHeartbeatResponse.json, v0-v1 (the same fields; flexible, so header v1): throttle
# int32, error int16, error message and member id (compact nullable strings), member epoch and
# heartbeat interval int32, the assignment (a nullable struct: int8 -1 = null, 1 = present) of
# [topic id uuid, [partition int32]], each struct ending in its tagged fields (none). kio's
# pure-Python writer took a tenth of a 5,000-member group's forming; this is what it writes.

_BEAT_FIXED: Final = struct.Struct(">ii")  # member epoch, heartbeat interval
_THROTTLE_AND_ERROR: Final = struct.Struct(">xih")  # header tagged fields, throttle, error
_NO_ASSIGNMENT: Final = b"\xff\x00"  # null assignment, response tagged fields
_NULL: Final = b"\x00"


def consumer_heartbeat_response_frame(
    correlation_id: int,
    error: int,
    error_message: str | None,
    member_id: str | None,
    member_epoch: int,
    heartbeat_interval_ms: int,
    assignment: Sequence[tuple[bytes, Sequence[int]]] | None,
) -> bytes:
    """One ConsumerGroupHeartbeat response frame (v0 and v1 are alike). `assignment`: (topic id
    as its 16 bytes, partitions) per topic, or None (not sent: unchanged)."""
    parts = [
        _THROTTLE_AND_ERROR.pack(0, error),
        _NULL if error_message is None else _compact_str(error_message),
        _NULL if member_id is None else _member_id(member_id),
        _BEAT_FIXED.pack(member_epoch, heartbeat_interval_ms),
    ]
    if assignment is None:
        parts.append(_NO_ASSIGNMENT)
    else:
        parts.append(b"\x01")
        parts.append(_uvarint(len(assignment) + 1))
        for topic_id, partitions in assignment:
            parts.append(topic_id)
            parts.append(_uvarint(len(partitions) + 1))
            parts.append(struct.pack(f">{len(partitions)}i", *partitions))
            parts.append(_NULL)  # topic tagged fields
        parts.append(b"\x00\x00")  # assignment's and response's tagged fields
    body = b"".join(parts)
    return _SIZE_AND_CORRELATION.pack(len(body) + 4, correlation_id) + body


def _compact_str(value: str) -> bytes:
    raw = value.encode()
    return _uvarint(len(raw) + 1) + raw


# A member's id is in every one of its responses: encoded once. Bounded like the client ids.
_member_ids: dict[str, bytes] = {}
_MEMBER_IDS_MAX: Final = 65_536


def _member_id(member_id: str) -> bytes:
    encoded = _member_ids.get(member_id)
    if encoded is None:
        encoded = _compact_str(member_id)
        if len(_member_ids) >= _MEMBER_IDS_MAX:
            _member_ids.clear()
        _member_ids[member_id] = encoded
    return encoded


# A committer commits to the same few topics over and over: each name's encoding (its length
# prefix included) is made once. Bounded: cleared when full, like the client ids.
_topic_names: tuple[dict[str, bytes], dict[str, bytes]] = ({}, {})  # [flexible]
_TOPIC_NAMES_MAX: Final = 4096


def _topic_name(name: str, flexible: bool) -> bytes:
    names = _topic_names[flexible]
    encoded = names.get(name)
    if encoded is None:
        raw = name.encode()
        encoded = (_uvarint(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw
        if len(names) >= _TOPIC_NAMES_MAX:
            names.clear()
        names[name] = encoded
    return encoded


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)

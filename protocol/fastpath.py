"""Fast paths for the two hottest APIs: Heartbeat requests and OffsetCommit responses, without kio.

Heartbeats are most of a coordinator's traffic (every member, every `heartbeat.interval.ms`), so
their cost decides throughput. kio's decode is not the slow part; what this saves is the general
route around it: the frame buffer, the header object, the entity and the command adapter. The
response side reuses `codec.encode_heartbeat_response`'s precomputed bodies.

Invariants:
- `parse_heartbeat` only ever accepts what the general decoder would decode to the same fields
  (tests/test_fastpath.py checks this differentially, with Hypothesis, against kio). Anything it is
  not sure of -- another API, an unsupported version, tagged fields, a long compact string, a
  truncated or oddly encoded frame -- returns None, and the caller takes the general path, which
  owns every error and every close. The fast path never raises on bad input.
- Trailing bytes after the body are ignored, as Kafka's parser (and the general path) does.

Pure: no I/O.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, Protocol

from .apis import HEARTBEAT

_SIZE_AND_HEADER: Final = struct.Struct(">ihhih")  # size, api key, version, correlation, client id
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_HEARTBEAT_MAX_VERSION: Final = 4  # v4 is flexible (KIP-482); v0-3 are not

HeartbeatFields = tuple[int, int, str, int, str, str | None]
"""(api_version, correlation_id, group_id, generation_id, member_id, group_instance_id)."""


def parse_heartbeat(data: bytes, max_frame_bytes: int) -> HeartbeatFields | None:
    """`data` is exactly one size-prefixed frame as read from the socket (size included)."""
    if len(data) < _SIZE_AND_HEADER.size:
        return None
    size, api_key, version, correlation_id, client_id_len = _SIZE_AND_HEADER.unpack_from(data, 0)
    if (
        api_key != HEARTBEAT
        or not 0 <= version <= _HEARTBEAT_MAX_VERSION
        or size + 4 != len(data)
        or size > max_frame_bytes
        or client_id_len < -1
    ):
        return None
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
            group_id, offset = _compact_string(data, offset + 1)
            (generation_id,) = _I32.unpack_from(data, offset)
            member_id, offset = _compact_string(data, offset + 4)
            instance_id, offset = _compact_nullable_string(data, offset)
            if data[offset] != 0:  # body tagged fields
                return None
            offset += 1
    except (IndexError, struct.error, UnicodeDecodeError, _Unsure):
        return None
    if offset > len(data):
        return None
    return version, correlation_id, group_id, generation_id, member_id, instance_id


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
# tagged-field sections). tests/test_fastpath.py checks every version against kio's decoder.


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


_OFFSET_COMMIT_FLEXIBLE = 8
_SIZE_AND_CORRELATION: Final = struct.Struct(">ii")
_PARTITION_ERROR: Final = struct.Struct(">ih")
_ZERO_THROTTLE: Final = b"\x00\x00\x00\x00"


def offset_commit_response_frame(
    version: int, correlation_id: int, topics: Sequence[CommitTopicErrors]
) -> bytes:
    flexible = version >= _OFFSET_COMMIT_FLEXIBLE
    parts: list[bytes] = [b"\x00"] if flexible else []  # response header v1: no tagged fields
    if version >= 3:
        parts.append(_ZERO_THROTTLE)
    pack = _PARTITION_ERROR.pack
    if flexible:
        parts.append(_uvarint(len(topics) + 1))
        for topic in topics:
            name = topic.name.encode()
            parts.append(_uvarint(len(name) + 1))
            parts.append(name)
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
            name = topic.name.encode()
            parts.append(_I16.pack(len(name)))
            parts.append(name)
            partitions = topic.partitions
            parts.append(_I32.pack(len(partitions)))
            parts.extend(pack(p.partition, p.error) for p in partitions)
    body = b"".join(parts)
    return _SIZE_AND_CORRELATION.pack(len(body) + 4, correlation_id) + body


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)

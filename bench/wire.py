"""A minimal, hand-written Kafka codec for the load generator: only what it sends and reads.

The benchmark must measure the server, not a client library, so this module encodes exactly the
requests the generator uses, in fixed non-flexible versions, and decodes only the response fields it
looks at. Nothing here is shared with `protocol/` on purpose: a bug in our server's codec must not
be hidden by the same bug in the generator.

Versions (all non-flexible, request header v1, response header v0):
  ApiVersions v0, FindCoordinator v1, JoinGroup v5, SyncGroup v3, Heartbeat v3, LeaveGroup v3.

Hot-path requests are pre-encoded as a `Template`: the frame bytes with the correlation id cut out,
so a send is one concatenation of three bytes objects.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

API_VERSIONS = 18
FIND_COORDINATOR = 10
JOIN_GROUP = 11
SYNC_GROUP = 14
HEARTBEAT = 12
LEAVE_GROUP = 13

# Error codes the generator reacts to.
NONE = 0
UNKNOWN_MEMBER_ID = 25
ILLEGAL_GENERATION = 22
REBALANCE_IN_PROGRESS = 27
MEMBER_ID_REQUIRED = 79

CLIENT_ID = "groupcoord-bench"

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HDR = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id


def i8(v: int) -> bytes:
    return struct.pack(">b", v)


def i16(v: int) -> bytes:
    return _I16.pack(v)


def i32(v: int) -> bytes:
    return _I32.pack(v)


def string(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def nstring(s: str | None) -> bytes:
    return _I16.pack(-1) if s is None else string(s)


def nbytes(b: bytes | None) -> bytes:
    return _I32.pack(-1) if b is None else _I32.pack(len(b)) + b


def array(items: list[bytes]) -> bytes:
    return _I32.pack(len(items)) + b"".join(items)


def frame(api_key: int, api_version: int, body: bytes, correlation_id: int) -> bytes:
    """Request header v1 (key, version, correlation id, client id) + body, size-prefixed."""
    rest = string(CLIENT_ID) + body
    return _HDR.pack(8 + len(rest), api_key, api_version, correlation_id) + rest


@dataclass(frozen=True, slots=True)
class Template:
    """A pre-encoded request: `head + correlation_id + tail` is the whole frame."""

    head: bytes
    tail: bytes

    @classmethod
    def of(cls, api_key: int, api_version: int, body: bytes) -> Template:
        whole = frame(api_key, api_version, body, 0)
        return cls(whole[:8], whole[12:])

    def with_id(self, correlation_id: int) -> bytes:
        return self.head + _I32.pack(correlation_id) + self.tail


# ---- consumer protocol payloads ----------------------------------------------------------------


def subscription(topics: list[str]) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user_data (null)."""
    return i16(0) + array([string(t) for t in topics]) + nbytes(None)


def assignment(topic: str, partitions: list[int]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], user_data (null)."""
    parts = array([i32(p) for p in partitions])
    return i16(0) + array([string(topic) + parts]) + nbytes(None)


# ---- request bodies ----------------------------------------------------------------------------


def api_versions_v0() -> tuple[int, int, bytes]:
    return API_VERSIONS, 0, b""


def find_coordinator_v1(group_id: str) -> tuple[int, int, bytes]:
    return FIND_COORDINATOR, 1, string(group_id) + i8(0)


def join_group_v5(
    group_id: str,
    member_id: str,
    metadata: bytes,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
) -> tuple[int, int, bytes]:
    body = (
        string(group_id)
        + i32(session_timeout_ms)
        + i32(rebalance_timeout_ms)
        + string(member_id)
        + nstring(None)
        + string("consumer")
        + array([string("range") + nbytes(metadata)])
    )
    return JOIN_GROUP, 5, body


def sync_group_v3(
    group_id: str, generation_id: int, member_id: str, assignments: list[tuple[str, bytes]]
) -> tuple[int, int, bytes]:
    body = (
        string(group_id)
        + i32(generation_id)
        + string(member_id)
        + nstring(None)
        + array([string(m) + nbytes(a) for m, a in assignments])
    )
    return SYNC_GROUP, 3, body


def heartbeat_v3(group_id: str, generation_id: int, member_id: str) -> tuple[int, int, bytes]:
    body = string(group_id) + i32(generation_id) + string(member_id) + nstring(None)
    return HEARTBEAT, 3, body


def leave_group_v3(group_id: str, member_ids: list[str]) -> tuple[int, int, bytes]:
    body = string(group_id) + array([string(m) + nstring(None) for m in member_ids])
    return LEAVE_GROUP, 3, body


# ---- response decoding (body = frame after the 4-byte correlation id) ----------------------------


class Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf = buf
        self.pos = 0

    def i16(self) -> int:
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return int(v)

    def i32(self) -> int:
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        s = self.buf[self.pos : self.pos + n].decode()
        self.pos += n
        return s

    def bytes_(self) -> bytes | None:
        n = self.i32()
        if n < 0:
            return None
        b = bytes(self.buf[self.pos : self.pos + n])
        self.pos += n
        return b


@dataclass(frozen=True, slots=True)
class JoinResponse:
    error_code: int
    generation_id: int
    protocol_name: str | None
    leader: str
    member_id: str
    members: list[str]


def decode_join_v5(body: bytes) -> JoinResponse:
    r = Reader(body)
    r.i32()  # throttle_time_ms
    error = r.i16()
    generation = r.i32()
    protocol = r.string()
    leader = r.string() or ""
    member_id = r.string() or ""
    members = []
    for _ in range(r.i32()):
        members.append(r.string() or "")
        r.string()  # group_instance_id
        r.bytes_()  # metadata
    return JoinResponse(error, generation, protocol, leader, member_id, members)


def decode_error_after_throttle(body: bytes) -> int:
    """SyncGroup v3 / Heartbeat v3 / LeaveGroup v3: throttle_time_ms then error_code."""
    return int(_I16.unpack_from(body, 4)[0])


def decode_sync_v3(body: bytes) -> tuple[int, bytes | None]:
    r = Reader(body)
    r.i32()
    error = r.i16()
    return error, r.bytes_()


def decode_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    r = Reader(body)
    error = r.i16()
    ranges = {}
    for _ in range(max(r.i32(), 0)):
        key = r.i16()
        ranges[key] = (r.i16(), r.i16())
    return error, ranges


def decode_find_coordinator_v1(body: bytes) -> tuple[int, str, int]:
    r = Reader(body)
    r.i32()
    error = r.i16()
    r.string()  # error_message
    r.i32()  # node_id
    host = r.string() or ""
    return error, host, r.i32()


# ---- KIP-848 (the rebalance scenario): CreateTopics v2, ConsumerGroupHeartbeat v0 ---------------

CREATE_TOPICS = 19
CONSUMER_GROUP_HEARTBEAT = 68


def create_topics_v2(name: str, partitions: int) -> tuple[int, int, bytes]:
    """One topic, replication factor 1, no assignments or configs; 30 s timeout."""
    topic = string(name) + i32(partitions) + i16(1) + array([]) + array([])
    return CREATE_TOPICS, 2, array([topic]) + i32(30_000) + i8(0)


def decode_create_topics_v2(body: bytes) -> int:
    """The first topic's error code (TOPIC_ALREADY_EXISTS = 36 is fine for the caller)."""
    r = Reader(body)
    r.i32()  # throttle_time_ms
    r.i32()  # one topic
    r.string()
    return r.i16()


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _cstring(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    b = s.encode()
    return _uvarint(len(b) + 1) + b


def _carray(items: list[bytes] | None) -> bytes:
    return b"\x00" if items is None else _uvarint(len(items) + 1) + b"".join(items)


def flexible_frame(api_key: int, api_version: int, body: bytes, correlation_id: int) -> bytes:
    """Request header v2 (v1 + an empty tagged-field section) + body (ending in its own tags)."""
    rest = string(CLIENT_ID) + b"\x00" + body
    return _HDR.pack(8 + len(rest), api_key, api_version, correlation_id) + rest


Owned = tuple[tuple[bytes, tuple[int, ...]], ...]
"""A member's partitions as the wire has them: (topic id, 16 bytes; partitions)."""


def consumer_group_heartbeat_v0(
    group_id: str,
    member_id: str,
    member_epoch: int,
    *,
    rebalance_timeout_ms: int = -1,
    topics: list[str] | None = None,
    owned: Owned | None = None,
) -> bytes:
    """ConsumerGroupHeartbeat v0's body (no instance id, rack or server assignor)."""
    parts = None
    if owned is not None:
        parts = [tid + _carray([i32(p) for p in ps]) + b"\x00" for tid, ps in owned]
    return (
        _cstring(group_id)
        + _cstring(member_id)
        + i32(member_epoch)
        + _cstring(None)
        + _cstring(None)
        + i32(rebalance_timeout_ms)
        + _carray(None if topics is None else [_cstring(t) for t in topics])
        + _cstring(None)
        + _carray(parts)
        + b"\x00"
    )


@dataclass(frozen=True, slots=True)
class ConsumerHeartbeatResponse:
    error_code: int
    member_id: str | None
    member_epoch: int
    heartbeat_interval_ms: int
    assignment: Owned | None  # None: unchanged


def decode_consumer_group_heartbeat_v0(body: bytes) -> ConsumerHeartbeatResponse:
    """`body` starts after the correlation id: response header v1's tagged fields come first."""
    buf = body
    pos = 0

    def uvarint() -> int:
        nonlocal pos
        n = shift = 0
        while True:
            b = buf[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            if b < 0x80:
                return n
            shift += 7

    def skip_tags() -> None:
        nonlocal pos
        for _ in range(uvarint()):
            uvarint()
            pos += uvarint()

    def cstring() -> str | None:
        nonlocal pos
        n = uvarint() - 1
        if n < 0:
            return None
        s = buf[pos : pos + n].decode()
        pos += n
        return s

    def i32_() -> int:
        nonlocal pos
        (v,) = _I32.unpack_from(buf, pos)
        pos += 4
        return int(v)

    skip_tags()  # response header v1
    i32_()  # throttle_time_ms
    (error,) = _I16.unpack_from(buf, pos)
    pos += 2
    cstring()  # error_message
    member_id = cstring()
    epoch = i32_()
    interval = i32_()
    assignment: Owned | None = None
    present = struct.unpack_from(">b", buf, pos)[0]
    pos += 1
    if present >= 0:
        topics = []
        for _ in range(uvarint() - 1):
            tid = bytes(buf[pos : pos + 16])
            pos += 16
            ps = tuple(i32_() for _ in range(uvarint() - 1))
            skip_tags()
            topics.append((tid, ps))
        skip_tags()
        assignment = tuple(topics)
    return ConsumerHeartbeatResponse(int(error), member_id, epoch, interval, assignment)

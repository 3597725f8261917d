"""The primitives of the record byte layout (coordinator.core.record_codec): Kafka's
non-flexible strings (int16 length + UTF-8, -1 = null) and bytes (int32 length + data), written
and read; a truncated or malformed field is a RecordDecodeError.

Pure: no I/O.
"""

from __future__ import annotations

import struct

__all__ = [
    "NULL_STRING",
    "B",
    "H",
    "I",
    "Q",
    "Reader",
    "RecordDecodeError",
    "bytes_at",
    "encode_bytes",
    "encode_nullable_string",
    "encode_string",
    "encode_string_once",
    "string_cache",
    "text_at",
]

H = struct.Struct(">h")
I = struct.Struct(">i")  # noqa: E741 -- the struct format's own letter
Q = struct.Struct(">q")
B = struct.Struct(">b")
NULL_STRING = H.pack(-1)


class RecordDecodeError(ValueError):
    """A known record type whose bytes cannot be decoded (unknown version, truncated)."""


string_cache: dict[str, bytes] = {}


def encode_string(s: str) -> bytes:
    """int16 length + UTF-8. Group ids and topics repeat on every commit, so they are cached."""
    b = string_cache.get(s)
    if b is None:
        b = encode_string_once(s)
        if len(string_cache) > 65_536:
            string_cache.clear()
        string_cache[s] = b
    return b


def encode_string_once(s: str) -> bytes:
    """`_string` without the cache, for the per-member strings of a group record (ids, client
    ids): caching them would hold a second copy of each for every member (~130 bytes a member,
    measured), and they are written once a rebalance, not once a commit."""
    data = s.encode()
    if len(data) > 0x7FFF:
        raise ValueError("string longer than 32767 bytes")
    return H.pack(len(data)) + data


def encode_nullable_string(s: str | None) -> bytes:
    return NULL_STRING if s is None else encode_string(s)


def encode_bytes(b: bytes) -> bytes:
    return I.pack(len(b)) + b


class Reader:
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

    def int8(self) -> int:
        v: int = B.unpack(self._take(1))[0]
        return v

    def int16(self) -> int:
        v: int = H.unpack(self._take(2))[0]
        return v

    def int32(self) -> int:
        v: int = I.unpack(self._take(4))[0]
        return v

    def int64(self) -> int:
        v: int = Q.unpack(self._take(8))[0]
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


def text_at(buf: bytes, pos: int) -> tuple[str | None, int]:
    """A nullable string at pos and the position after it (loading speed: no reader object)."""
    (n,) = H.unpack_from(buf, pos)
    pos += 2
    end = pos + n
    # `>=` for `>` is an equivalent mutant: no group value ends with a string (the member count
    # or a byte array follows), so the next read refuses such a buffer either way.
    if n < 0 or end > len(buf):  # pragma: no mutate
        if n == -1:
            return None, pos
        raise RecordDecodeError("truncated record")
    return buf[pos:end].decode(), end


def bytes_at(buf: bytes, pos: int) -> tuple[bytes, int]:
    (n,) = I.unpack_from(buf, pos)
    pos += 4
    end = pos + n
    if n < 0 or end > len(buf):
        raise RecordDecodeError("truncated record")
    return buf[pos:end], end

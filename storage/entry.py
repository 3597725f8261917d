"""Log entry framing: one key/value record per entry, self-checking and resynchronisable.

Layout (big-endian), 38-byte header then the body::

    magic         4s   b"GCe\\x01"  -- lets a reader find the next entry after a damaged one
    version       u8   FORMAT_VERSION (1); an unknown version is treated as damage
    attributes    u8   reserved, 0
    key_len       u32
    value_len     i32  -1 = tombstone (null value)
    offset        i64  the log offset: strictly increasing, kept by compaction (as in Kafka)
    timestamp_ms  i64  wall clock at append; compaction ages tombstones by it
    body_crc      u32  CRC-32 (zlib) of key + value
    header_crc    u32  CRC-32 (zlib) of the 34 header bytes before it
    key, value         key_len and max(value_len, 0) bytes

Why two CRCs: the header CRC makes the length fields trustworthy. A damaged length can then never
be mistaken for "the entry runs past the end of the file", which would otherwise throw away every
good entry after it as a torn tail.

Why zlib.crc32 rather than CRC-32C: it is in the standard library (C speed, no dependency) and the
job is detecting torn writes and bit rot in our own files, not matching a wire format.

Reading rules (`EntryReader`), the invariants the rest of storage relies on:
- An entry is valid when its magic, version, header CRC, size bounds and body CRC all check out.
- Invalid bytes between two valid entries are *damage*: reported (position, length) and skipped;
  the reader resynchronises by searching for the next magic that starts a valid entry. What is lost
  is exactly the entries whose bytes overlap the damaged region (usually one).
- Invalid bytes after the last valid entry are the *torn tail* (`valid_end`, `tail_bytes`): an
  append that did not complete. The disk log truncates them at start-up.
- Arbitrary input never raises; a magic sequence inside a payload is rejected by the CRCs.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

MAGIC = b"GCe\x01"
FORMAT_VERSION = 1
HEADER = struct.Struct(">4sBBIiqqII")
HEADER_BYTES = HEADER.size  # 38
_HEAD = struct.Struct(">4sBBIiqqI")  # HEADER up to the header CRC, which covers exactly these
_HEADER_CRC_SPAN = _HEAD.size  # HEADER_BYTES - 4
_U32 = struct.Struct(">I")
MAX_ENTRY_BYTES = 64 * 1024 * 1024  # key + value; larger is treated as damage
# The header fields loading checks (magic as an int, version, lengths, CRCs), skipping the rest:
# fewer objects per entry than HEADER.
_KV_HEADER = struct.Struct(">IBxIi16xII")
_MAGIC_INT = int.from_bytes(MAGIC, "big")


class Entry(NamedTuple):
    offset: int
    timestamp_ms: int
    key: bytes
    value: bytes | None  # None = tombstone


@dataclass(frozen=True, slots=True)
class Damage:
    """Bytes that do not form a valid entry, between two valid ones."""

    position: int  # byte position of the first invalid byte (within the scanned buffer)
    length_bytes: int


def encode_entry(offset: int, timestamp_ms: int, key: bytes, value: bytes | None) -> bytes:
    # On every append's path: the header without its CRC is packed alone (no slicing), and key
    # and value are joined once, with it.
    crc32 = zlib.crc32
    if value is None:
        value_len = -1
        body_crc = crc32(key)
        value = b""
    else:
        value_len = len(value)
        body_crc = crc32(value, crc32(key))
    if len(key) + len(value) > MAX_ENTRY_BYTES:
        raise ValueError(f"entry of {len(key) + len(value)} bytes exceeds {MAX_ENTRY_BYTES}")
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, 0, len(key), value_len, offset, timestamp_ms, body_crc)
    return b"".join((head, _U32.pack(crc32(head)), key, value))


def _entry_at(buf: bytes, pos: int) -> tuple[Entry, int] | None:
    """The valid entry starting at pos and the position after it, or None."""
    end_header = pos + HEADER_BYTES
    if end_header > len(buf):
        return None
    magic, version, _attrs, key_len, value_len, offset, ts, body_crc, header_crc = (
        HEADER.unpack_from(buf, pos)
    )
    if magic != MAGIC or version != FORMAT_VERSION:
        return None
    if zlib.crc32(buf[pos : pos + _HEADER_CRC_SPAN]) != header_crc:
        return None
    if value_len < -1 or key_len + max(value_len, 0) > MAX_ENTRY_BYTES:
        return None
    key_end = end_header + key_len
    end = key_end + max(value_len, 0)
    if end > len(buf):
        return None
    key = buf[end_header:key_end]
    crc = zlib.crc32(key)
    # Equivalent mutants on the two no-mutate lines: _resync only asks whether an entry is
    # valid (None or not), and a value_len of 0 adds nothing to the body CRC either way.
    value: bytes | None = None  # pragma: no mutate
    if value_len >= 0:  # pragma: no mutate
        value = buf[key_end:end]
        crc = zlib.crc32(value, crc)
    if crc != body_crc:
        return None
    return Entry(offset, ts, key, value), end


class EntryReader:
    """Iterate the valid entries of a buffer; afterwards `damages`, `valid_end`, `tail_bytes`.

    `buf` is typically a whole segment file. Iteration never raises on bad input.
    """

    __slots__ = ("_buf", "damages", "entries_read", "last_offset", "tail_bytes", "valid_end")

    def __init__(self, buf: bytes) -> None:
        self._buf = buf
        self.damages: list[Damage] = []
        self.valid_end = 0
        # Equivalent under mutation: read only after an iteration, which ends by setting it.
        self.tail_bytes = 0  # pragma: no mutate
        self.entries_read = 0
        self.last_offset = -1

    def __iter__(self) -> Iterator[Entry]:
        buf = self._buf
        size = len(buf)
        pos = 0
        unpack_from = HEADER.unpack_from
        crc32 = zlib.crc32
        count = 0
        # `<=` is an equivalent mutant: at pos == size no header fits and _resync finds nothing.
        while pos < size:  # pragma: no mutate
            # Fast path: the common, valid entry, inlined (loading speed matters,
            # docs/protocol.md §12.3).
            if pos + HEADER_BYTES <= size:
                magic, version, _a, key_len, value_len, offset, ts, body_crc, header_crc = (
                    unpack_from(buf, pos)
                )
                key_end = pos + HEADER_BYTES + key_len
                end = key_end + (value_len if value_len > 0 else 0)
                if (
                    magic == MAGIC
                    and version == FORMAT_VERSION
                    and value_len >= -1
                    and end <= size
                    and crc32(buf[pos : pos + _HEADER_CRC_SPAN]) == header_crc
                ):
                    key = buf[pos + HEADER_BYTES : key_end]
                    value: bytes | None
                    if value_len >= 0:
                        value_bytes = buf[key_end:end]
                        value = value_bytes
                        ok = crc32(value_bytes, crc32(key)) == body_crc
                    else:
                        value = None
                        ok = crc32(key) == body_crc
                    if ok:
                        count += 1
                        self.last_offset = offset
                        yield Entry(offset, ts, key, value)
                        pos = end
                        self.valid_end = pos
                        continue
            nxt = self._resync(pos + 1)
            # Equivalent mutants (`<= 0`, `< 1`): _resync returns -1 or a position > pos >= 0.
            if nxt < 0:  # pragma: no mutate
                break
            self.damages.append(Damage(pos, nxt - pos))
            pos = nxt
        self.entries_read = count
        self.tail_bytes = size - self.valid_end

    def kv_batches(self, max_entries: int) -> Iterator[tuple[list[bytes], list[bytes | None]]]:
        """The same entries as iteration, as parallel (keys, values) lists of up to max_entries.

        For loading: no object and no generator step per entry, a fifth of the framing cost
        (§12.3 wants loading fast). The same checks and bookkeeping as `__iter__`; offsets and
        timestamps are not returned (`last_offset` is kept). The lists are the caller's."""
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        size = len(self._buf)
        pos = 0
        while pos < size:
            keys: list[bytes] = []
            values: list[bytes | None] = []
            pos = self._fill(pos, max_entries, keys, values)
            if keys:
                yield keys, values
        self.tail_bytes = size - self.valid_end

    def _fill(
        self, pos: int, max_entries: int, keys: list[bytes], values: list[bytes | None]
    ) -> int:
        """Append up to max_entries valid entries from pos on; the position after them, or the
        buffer's size when nothing valid is left. The fast path of `__iter__`, appending."""
        buf = self._buf
        size = len(buf)
        unpack_from = _KV_HEADER.unpack_from
        crc32 = zlib.crc32
        add_key, add_value = keys.append, values.append
        magic_ok, version_ok = _MAGIC_INT, FORMAT_VERSION
        head, crc_span = HEADER_BYTES, _HEADER_CRC_SPAN
        room = max_entries
        last_at = -1  # where the last valid entry starts: its offset is read once, at the end
        valid_end = self.valid_end
        while room and pos < size:
            if pos + head <= size:
                magic, version, key_len, value_len, body_crc, header_crc = unpack_from(buf, pos)
                key_end = pos + head + key_len
                end = key_end + (value_len if value_len > 0 else 0)
                if (
                    magic == magic_ok
                    and version == version_ok
                    and value_len >= -1
                    and end <= size
                    and crc32(buf[pos : pos + crc_span]) == header_crc
                ):
                    key = buf[pos + head : key_end]
                    value: bytes | None
                    if value_len >= 0:
                        value = buf[key_end:end]
                        ok = crc32(value, crc32(key)) == body_crc
                    else:
                        value = None
                        ok = crc32(key) == body_crc
                    if ok:
                        add_key(key)
                        add_value(value)
                        last_at = pos
                        pos = valid_end = end
                        room -= 1
                        continue
            nxt = self._resync(pos + 1)
            # Equivalent mutants (`<= 0`, `< 1`): _resync returns -1 or a position > pos >= 0.
            if nxt < 0:  # pragma: no mutate
                pos = size
                break
            self.damages.append(Damage(pos, nxt - pos))
            pos = nxt
        self.valid_end = valid_end
        if last_at >= 0:
            self.last_offset = HEADER.unpack_from(buf, last_at)[5]
        self.entries_read += max_entries - room
        return pos

    def _resync(self, start: int) -> int:
        """Position of the next valid entry at or after start, or -1."""
        buf = self._buf
        pos = buf.find(MAGIC, start)
        # Equivalent mutants (`> 0`, `>= 1`): every caller starts at 1 or later.
        while pos >= 0:  # pragma: no mutate
            if _entry_at(buf, pos) is not None:
                return pos
            pos = buf.find(MAGIC, pos + 1)
        return -1


def read_entries(buf: bytes) -> tuple[list[Entry], list[Damage], int]:
    """All valid entries, the damaged regions, and valid_end (where a torn tail starts)."""
    reader = EntryReader(buf)
    entries = list(reader)
    return entries, reader.damages, reader.valid_end

"""A structural pre-scan that makes kio's native reader safe on untrusted input.

kio 0.6.5's native reader reserves memory for an array from the length on the wire before checking
that the buffer can hold it; a 20-byte frame claiming 2**34 elements makes the Rust allocator fail,
which aborts the whole process (found by tests/protocol/test_codec.py's fuzz test). A peer must
never be able to do that, so every request schema that contains an array is first walked here,
without building anything: each array's claimed length must fit in the bytes that remain (every
element of every request array we accept encodes to at least one byte; `min_size` is checked when
the scanner is built), and every string, bytes and tagged field must fit in the frame.

Invariants:
- `scanner_for(cls)` is None for schemas without arrays: nothing there allocates from a length
  without reading the bytes, so the native reader is used directly.
- A scan raises MalformedScan or returns the end offset; it never allocates more than O(depth).
- Unknown tagged fields are skipped by their declared size (KIP-482); known ones are scanned within
  that size, as the lenient reader parses them.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import fields
from functools import cache

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from .varint import VarintError, read_uvarint

__all__ = ["MalformedScan", "scanner_for"]

# (frame, offset, end) -> new offset; `end` bounds the scan (the frame, or a tagged field's bytes).
Scan = Callable[[bytes | memoryview, int, int], int]

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")

_FIXED_SIZES = {
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


class MalformedScan(Exception):
    """The frame's structure does not fit its schema."""


def _uvarint(frame: bytes | memoryview, offset: int, end: int) -> tuple[int, int]:
    try:
        return read_uvarint(frame, offset, end, max_bytes=10)
    except VarintError as exc:
        raise MalformedScan(str(exc)) from None


def _need(offset: int, size: int, end: int) -> int:
    offset += size
    if offset > end:
        raise MalformedScan("field runs past the end")
    return offset


def _fixed(size: int) -> Scan:
    def scan(frame: bytes | memoryview, offset: int, end: int) -> int:
        return _need(offset, size, end)

    return scan


def _compact_bytes(frame: bytes | memoryview, offset: int, end: int) -> int:
    length, offset = _uvarint(frame, offset, end)
    return offset if length == 0 else _need(offset, length - 1, end)


def _legacy_string(frame: bytes | memoryview, offset: int, end: int) -> int:
    _need(offset, 2, end)
    length: int = _I16.unpack_from(frame, offset)[0]
    return _need(offset + 2, max(length, 0), end)


def _legacy_bytes(frame: bytes | memoryview, offset: int, end: int) -> int:
    _need(offset, 4, end)
    length: int = _I32.unpack_from(frame, offset)[0]
    return _need(offset + 4, max(length, 0), end)


def _primitive(kafka_type: str, flexible: bool) -> tuple[Scan, int]:
    """The scanner for one value, and the fewest bytes it can take."""
    if kafka_type in _FIXED_SIZES:
        size = _FIXED_SIZES[kafka_type]
        return _fixed(size), size
    if kafka_type in ("string", "bytes", "records"):
        if flexible:
            return _compact_bytes, 1
        return (_legacy_string, 2) if kafka_type == "string" else (_legacy_bytes, 4)
    raise NotImplementedError(f"no scanner for kafka_type {kafka_type!r}")


def _array(item: Scan, item_min_size: int, flexible: bool) -> Scan:
    if item_min_size < 1:
        raise NotImplementedError("arrays of zero-size elements cannot be bounded")

    def scan(frame: bytes | memoryview, offset: int, end: int) -> int:
        if flexible:
            count, offset = _uvarint(frame, offset, end)
            count -= 1  # 0 = null
        else:
            _need(offset, 4, end)
            count = _I32.unpack_from(frame, offset)[0]
            offset += 4
        if count * item_min_size > end - offset:
            raise MalformedScan(f"array of {count} elements cannot fit in {end - offset} bytes")
        for _ in range(count):
            offset = item(frame, offset, end)
        return offset

    return scan


def _nullable_struct(inner: Scan) -> Scan:
    def scan(frame: bytes | memoryview, offset: int, end: int) -> int:
        _need(offset, 1, end)
        if frame[offset] == 0xFF:  # int8 -1 = null (KIP-893)
            return offset + 1
        return inner(frame, offset + 1, end)

    return scan


@cache
def _entity(entity_type: type) -> tuple[Scan, int, bool]:
    """(scanner, minimum encoded size, contains an array) for a kio entity class."""
    flexible: bool = entity_type.__flexible__  # type: ignore[attr-defined]
    plain: list[Scan] = []
    tagged: dict[int, Scan] = {}
    min_size = 1 if flexible else 0  # the tagged-field count
    has_array = False
    for field in fields(entity_type):
        kind = classify_field(field)
        tag = get_field_tag(field)
        if isinstance(kind, EntityField | EntityTupleField):
            scan, size, nested_array = _entity(kind.type_)
            has_array = has_array or nested_array
            if isinstance(kind, EntityTupleField):
                scan, size, has_array = _array(scan, size, flexible), (1 if flexible else 4), True
            elif tag is None and is_optional(field):
                scan, size = _nullable_struct(scan), 1
        else:
            scan, size = _primitive(get_schema_field_type(field), flexible)
            if isinstance(kind, PrimitiveTupleField):
                scan, size, has_array = _array(scan, size, flexible), (1 if flexible else 4), True
        if tag is None:
            plain.append(scan)
            min_size += size
        else:
            tagged[int(tag)] = scan

    def scan_entity(frame: bytes | memoryview, offset: int, end: int) -> int:
        for scan_field in plain:
            offset = scan_field(frame, offset, end)
        if flexible:
            count, offset = _uvarint(frame, offset, end)
            if count > end - offset:
                raise MalformedScan("more tagged fields than bytes")
            for _ in range(count):
                tag, offset = _uvarint(frame, offset, end)
                size, offset = _uvarint(frame, offset, end)
                field_end = _need(offset, size, end)
                known = tagged.get(tag)
                if known is not None:
                    known(frame, offset, field_end)
                offset = field_end
        return offset

    return scan_entity, min_size, has_array


def scanner_for(entity_type: type) -> Scan | None:
    """The pre-scan for a request class, or None when it has no arrays (nothing to guard)."""
    scan, _, has_array = _entity(entity_type)
    return scan if has_array else None

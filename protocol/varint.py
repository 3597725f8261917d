"""Unsigned varints and tagged-field sections (KIP-482), read without building anything.

One reader for every place that walks flexible-version bytes by hand: the request header
(protocol.codec), the pre-scan that guards kio (protocol.guard), the sidecar's header rewriting
(coordinator.sidecar.rewrite) and the groups CLI's response reader (coordinator.tools.groups).

Invariants: reads never pass `end` (default: the end of the buffer); a truncated or over-long
varint raises VarintError (a ValueError), which each caller turns into its own error. Pure.
"""

from __future__ import annotations

__all__ = ["VarintError", "read_uvarint", "skip_tagged_fields"]


class VarintError(ValueError):
    """A truncated or over-long varint, or a tagged field that runs past the end."""


def read_uvarint(
    buf: bytes | memoryview, offset: int, end: int | None = None, max_bytes: int = 5
) -> tuple[int, int]:
    """(value, offset after it). `max_bytes`: 5 for the 32-bit lengths and tags of KIP-482."""
    if end is None:
        end = len(buf)
    value = shift = 0
    limit = 7 * max_bytes
    while True:
        if offset >= end:
            raise VarintError("truncated varint")
        byte = buf[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, offset
        shift += 7
        if shift >= limit:
            raise VarintError(f"varint longer than {max_bytes} bytes")


def skip_tagged_fields(buf: bytes | memoryview, offset: int, end: int | None = None) -> int:
    """The offset after a tagged-field section: its count, then (tag, size, bytes) each."""
    if end is None:
        end = len(buf)
    count, offset = read_uvarint(buf, offset, end)
    for _ in range(count):
        _, offset = read_uvarint(buf, offset, end)
        size, offset = read_uvarint(buf, offset, end)
        offset += size
        if offset > end:
            raise VarintError("tagged field runs past the end")
    return offset

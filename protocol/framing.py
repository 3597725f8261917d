"""Kafka request framing: a 4-byte big-endian signed size, then that many bytes of request.

`FrameBuffer` is fed whatever the transport read and hands back whole frames (without the size
prefix), in order. Modelled on h11's receive buffer.

Invariants:
- A frame larger than `max_frame_bytes` is refused as soon as its 4-byte size is visible, before
  anything is allocated for it (Kafka's `socket.request.max.bytes` check in NetworkReceive); a
  negative size is refused likewise. After a FramingError the buffer is unusable: the peer sent
  garbage and the connection is closed.
- Many small frames in one chunk cost O(total bytes): frames are sliced from a bytearray at a read
  offset, and consumed bytes are dropped only when they are at least half the buffer.
"""

from __future__ import annotations

import struct
from typing import Final

__all__ = ["FrameBuffer", "FrameTooLarge", "FramingError", "InvalidFrameSize"]

_SIZE: Final = struct.Struct(">i")
_COMPACT_MIN_BYTES: Final = 64 * 1024


class FramingError(Exception):
    """The peer sent a frame size we refuse; close the connection."""


class FrameTooLarge(FramingError):
    def __init__(self, size: int, max_frame_bytes: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the {max_frame_bytes} byte limit")
        self.size = size
        self.max_frame_bytes = max_frame_bytes


class InvalidFrameSize(FramingError):
    def __init__(self, size: int) -> None:
        super().__init__(f"invalid frame size {size}")
        self.size = size


class FrameBuffer:
    __slots__ = ("_buffer", "_max_frame_bytes", "_pending_size", "_read_offset")

    def __init__(self, max_frame_bytes: int) -> None:
        if max_frame_bytes < 0:
            raise ValueError("max_frame_bytes must be >= 0")
        self._buffer = bytearray()
        self._read_offset = 0
        self._max_frame_bytes = max_frame_bytes
        # The size of the frame at _read_offset once its prefix has been seen and checked.
        self._pending_size = -1

    @property
    def buffered_bytes(self) -> int:
        """Bytes received and not yet returned as frames (including a partial size prefix)."""
        return len(self._buffer) - self._read_offset

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes; raises FramingError if the next frame's size is refused."""
        self._buffer += data
        if self._pending_size < 0:
            self._check_size()

    def next_frame(self) -> bytes | None:
        """The next whole frame without its size prefix, or None until more bytes arrive."""
        size = self._pending_size if self._pending_size >= 0 else self._check_size()
        if size < 0:
            return None
        start = self._read_offset + 4
        end = start + size
        buffer = self._buffer
        if end > len(buffer):
            return None
        frame = bytes(buffer[start:end])
        self._pending_size = -1
        if end == len(buffer):
            buffer.clear()
            self._read_offset = 0
        elif end >= _COMPACT_MIN_BYTES and end * 2 >= len(buffer):
            del buffer[:end]
            self._read_offset = 0
        else:
            self._read_offset = end
        return frame

    def _check_size(self) -> int:
        """Read and validate the size prefix at the read offset; -1 if it is not all here yet."""
        offset = self._read_offset
        if len(self._buffer) - offset < 4:
            return -1
        size: int = _SIZE.unpack_from(self._buffer, offset)[0]
        if size < 0:
            raise InvalidFrameSize(size)
        if size > self._max_frame_bytes:
            raise FrameTooLarge(size, self._max_frame_bytes)
        self._pending_size = size
        return size

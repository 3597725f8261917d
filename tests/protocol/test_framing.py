"""FrameBuffer: size-prefixed frames, refused sizes, arbitrary chunking, fuzz."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.framing import FrameBuffer, FrameTooLarge, FramingError, InvalidFrameSize


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def drain(buffer: FrameBuffer) -> list[bytes]:
    frames = []
    while (f := buffer.next_frame()) is not None:
        frames.append(f)
    return frames


def test_one_frame_in_pieces() -> None:
    buffer = FrameBuffer(100)
    data = frame(b"hello")
    for byte in data[:-1]:
        buffer.feed(bytes([byte]))
        assert buffer.next_frame() is None
    buffer.feed(data[-1:])
    assert buffer.next_frame() == b"hello"
    assert buffer.next_frame() is None
    assert buffer.buffered_bytes == 0


def test_empty_frame() -> None:
    buffer = FrameBuffer(10)
    buffer.feed(frame(b""))
    assert buffer.next_frame() == b""


def test_too_large_is_refused_as_soon_as_the_size_is_seen() -> None:
    buffer = FrameBuffer(1000)
    buffer.feed(b"\x00\x00")
    assert buffer.next_frame() is None
    with pytest.raises(FrameTooLarge) as info:
        buffer.feed(struct.pack(">i", 1001)[2:])
    assert info.value.size == 1001


def test_too_large_after_a_good_frame() -> None:
    buffer = FrameBuffer(10)
    buffer.feed(frame(b"ok") + struct.pack(">i", 2**31 - 1))
    assert buffer.next_frame() == b"ok"
    with pytest.raises(FrameTooLarge):
        buffer.next_frame()


def test_exact_cap_is_accepted() -> None:
    buffer = FrameBuffer(3)
    buffer.feed(frame(b"abc"))
    assert buffer.next_frame() == b"abc"


def test_negative_size() -> None:
    buffer = FrameBuffer(10)
    with pytest.raises(InvalidFrameSize):
        buffer.feed(struct.pack(">i", -1))


def test_many_small_frames_in_one_chunk() -> None:
    payloads = [bytes([i % 256]) * (i % 7) for i in range(50_000)]
    buffer = FrameBuffer(100)
    buffer.feed(b"".join(frame(p) for p in payloads))
    assert drain(buffer) == payloads
    assert buffer.buffered_bytes == 0


def test_compaction_keeps_partial_frame() -> None:
    buffer = FrameBuffer(200_000)
    big = b"x" * 100_000
    buffer.feed(frame(big) + frame(b"tail")[:5])
    assert buffer.next_frame() == big
    assert buffer.next_frame() is None
    buffer.feed(frame(b"tail")[5:])
    assert buffer.next_frame() == b"tail"


@given(
    payloads=st.lists(st.binary(max_size=64), max_size=20),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=10),
)
def test_any_chunking_yields_the_same_frames(payloads: list[bytes], cuts: list[int]) -> None:
    data = b"".join(frame(p) for p in payloads)
    points = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    buffer = FrameBuffer(64)
    out: list[bytes] = []
    for start, end in itertools.pairwise(points):
        buffer.feed(data[start:end])
        out.extend(drain(buffer))
    assert out == payloads


@given(chunks=st.lists(st.binary(max_size=40), max_size=10), cap=st.integers(0, 2**31 - 1))
def test_fuzz_only_framing_errors(chunks: list[bytes], cap: int) -> None:
    buffer = FrameBuffer(cap)
    try:
        for chunk in chunks:
            buffer.feed(chunk)
            for f in drain(buffer):
                assert len(f) <= cap
    except FramingError:
        pass

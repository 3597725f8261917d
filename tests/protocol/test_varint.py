"""protocol.varint: the one hand-written reader of unsigned varints and tagged-field sections."""

from __future__ import annotations

import io

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kio.serial.writers import write_unsigned_varint

from protocol.varint import VarintError, read_uvarint, skip_tagged_fields


def uvarint(value: int) -> bytes:
    buffer = io.BytesIO()
    write_unsigned_varint(buffer, value)
    return buffer.getvalue()


@given(st.integers(0, 2**32 - 1), st.binary(max_size=8))
def test_reads_what_kio_writes(value: int, tail: bytes) -> None:
    data = uvarint(value) + tail
    assert read_uvarint(data, 0) == (value, len(data) - len(tail))


@given(st.integers(128, 2**32 - 1))
def test_truncated_and_bounded(value: int) -> None:
    data = uvarint(value)
    with pytest.raises(VarintError):
        read_uvarint(data[:-1], 0)
    with pytest.raises(VarintError):
        read_uvarint(data, 0, end=len(data) - 1)


def test_longer_than_allowed() -> None:
    with pytest.raises(VarintError):
        read_uvarint(b"\x80" * 5 + b"\x01", 0)
    assert read_uvarint(b"\x80" * 9 + b"\x01", 0, max_bytes=10) == (1 << 63, 10)


@given(st.lists(st.tuples(st.integers(0, 2**31 - 1), st.binary(max_size=20)), max_size=5))
def test_skips_a_tagged_section(fields: list[tuple[int, bytes]]) -> None:
    section = uvarint(len(fields)) + b"".join(
        uvarint(tag) + uvarint(len(value)) + value for tag, value in fields
    )
    assert skip_tagged_fields(section + b"rest", 0) == len(section)
    if fields and fields[-1][1]:
        with pytest.raises(VarintError):
            skip_tagged_fields(section[:-1], 0)

"""Entry framing pinned where mutation testing found it loose (issue 28, `make mutation`).

storage/entry.py's reading rules, on buffers built here byte by byte: an entry whose header CRC
checks out but whose version or value length is not one this reader writes is damage, both where
the reader is and where it resynchronises after damage; the smallest entry (empty key,
tombstone: the header alone) is read at the very end of a buffer, after damage too; one damaged
byte loses no entry; and the size bound applies where the reader resynchronises.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from storage import entry
from storage.entry import Damage, Entry, EntryReader, encode_entry, read_entries

HEAD = struct.Struct(">4sBBIiqqI")


def raw_entry(
    key: bytes, value: bytes | None, *, version: int = 1, value_len: int | None = None
) -> bytes:
    """An entry with consistent CRCs whatever its fields say."""
    body = value or b""
    vlen = (-1 if value is None else len(body)) if value_len is None else value_len
    body_crc = zlib.crc32(body, zlib.crc32(key))
    head = HEAD.pack(entry.MAGIC, version, 0, len(key), vlen, 7, 1_000, body_crc)
    return head + struct.pack(">I", zlib.crc32(head)) + key + body


def both_ways(buf: bytes) -> tuple[list[Entry], list[Damage], int]:
    """read_entries, checked against kv_batches (the loading path) on the same bytes."""
    entries, damages, valid_end = read_entries(buf)
    reader = EntryReader(buf)
    keys: list[bytes] = []
    values: list[bytes | None] = []
    for k, v in reader.kv_batches(2):
        keys += k
        values += v
    assert (keys, values) == ([e.key for e in entries], [e.value for e in entries])
    assert (reader.damages, reader.valid_end) == (damages, valid_end)
    return entries, damages, valid_end


A = encode_entry(1, 10, b"a", b"1")
B = encode_entry(2, 20, b"b", b"2")


@pytest.mark.parametrize(
    "bad",
    [raw_entry(b"k", b"v", version=2), raw_entry(b"k", None, value_len=-2)],
    ids=["version 2", "value length -2"],
)
def test_a_well_checksummed_entry_of_a_shape_we_do_not_write_is_damage(bad: bytes) -> None:
    assert both_ways(A + bad + B) == (
        [Entry(1, 10, b"a", b"1"), Entry(2, 20, b"b", b"2")],
        [Damage(len(A), len(bad))],
        len(A) + len(bad) + len(B),
    )
    # after damage too: the reader must not resynchronise onto it
    garbage = b"\x00" * 5
    assert both_ways(A + garbage + bad + B)[1] == [Damage(len(A), len(garbage) + len(bad))]


def test_the_smallest_entry_is_read_at_the_very_end_and_after_damage() -> None:
    last = encode_entry(3, 30, b"", None)
    assert len(last) == entry.HEADER_BYTES
    assert both_ways(A + last) == (
        [Entry(1, 10, b"a", b"1"), Entry(3, 30, b"", None)],
        [],
        len(A) + len(last),
    )
    entries, damages, _ = both_ways(A + b"\xff" * 3 + last)
    assert entries[-1] == Entry(3, 30, b"", None)
    assert damages == [Damage(len(A), 3)]


def test_one_damaged_byte_loses_no_entry() -> None:
    assert both_ways(A + b"\x00" + B) == (
        [Entry(1, 10, b"a", b"1"), Entry(2, 20, b"b", b"2")],
        [Damage(len(A), 1)],
        len(A) + 1 + len(B),
    )


def test_resynchronising_applies_the_size_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the bound at 8 bytes of key + value: an entry of exactly 8 (a tombstone with an
    8-byte key too) is valid where the reader resynchronises, one of 9 is not."""
    at_bound = encode_entry(3, 30, b"kkkk", b"vvvv")
    tomb = encode_entry(4, 40, b"kkkkkkkk", None)
    over = encode_entry(5, 50, b"kkkk", b"vvvvv")
    monkeypatch.setattr(entry, "MAX_ENTRY_BYTES", 8)
    g = b"\x00" * 3
    assert [e.offset for e in both_ways(A + g + at_bound + B)[0]] == [1, 3, 2]
    assert [e.offset for e in both_ways(A + g + tomb + B)[0]] == [1, 4, 2]
    _, damages, _ = both_ways(A + g + over + B)
    assert damages == [Damage(len(A), len(g) + len(over))]


def test_kv_batches_refuses_an_empty_batch_size() -> None:
    with pytest.raises(ValueError, match=r"^max_entries must be >= 1, got 0$"):
        next(EntryReader(A).kv_batches(0))

"""Entry framing: round trip, torn tails at every byte, damage in the middle, arbitrary bytes."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from storage.entry import HEADER_BYTES, Entry, EntryReader, encode_entry, read_entries


def sample(n: int) -> list[Entry]:
    return [
        Entry(i, 1000 + i, f"key-{i % 5}".encode(), None if i % 7 == 3 else f"value-{i}".encode())
        for i in range(n)
    ]


def encode(entries: list[Entry]) -> bytes:
    return b"".join(encode_entry(*e) for e in entries)


def test_round_trip() -> None:
    entries = sample(30)
    got, damages, valid_end = read_entries(encode(entries))
    assert got == entries
    assert damages == []
    assert valid_end == len(encode(entries))


def test_torn_tail_at_every_byte_of_the_last_entries() -> None:
    entries = sample(10)
    data = encode(entries)
    keep = len(encode(entries[:7]))
    for cut in range(keep, len(data)):
        reader = EntryReader(data[:cut])
        got = list(reader)
        whole = [e for e in entries if len(encode(entries[: e.offset + 1])) <= cut]
        assert got == whole, cut
        assert reader.damages == [], cut  # a torn tail is not reported as damage
        assert reader.valid_end == len(encode(whole))
        assert reader.tail_bytes == cut - reader.valid_end


def test_bit_flip_in_every_byte_of_a_middle_entry_loses_only_that_entry() -> None:
    entries = sample(9)
    data = encode(entries)
    start = len(encode(entries[:4]))
    end = len(encode(entries[:5]))
    for pos in range(start, end):
        for bit in (0, 5):
            damaged = bytearray(data)
            damaged[pos] ^= 1 << bit
            reader = EntryReader(bytes(damaged))
            got = list(reader)
            assert got == entries[:4] + entries[5:], (pos, bit)
            assert len(reader.damages) == 1
            assert reader.damages[0].position == start
            assert reader.damages[0].length_bytes == end - start
            assert reader.tail_bytes == 0


def test_damaged_length_is_not_mistaken_for_a_torn_tail() -> None:
    entries = sample(6)
    data = bytearray(encode(entries))
    data[10] = 0x7F  # key_len now points far past the end; the header CRC catches it
    got = list(EntryReader(bytes(data)))
    assert got == entries[1:]


def test_garbage_between_entries_is_skipped_and_reported() -> None:
    entries = sample(4)
    junk = b"\x00" * 100 + b"GCe\x01" + b"\xff" * 50  # includes a false magic
    data = encode(entries[:2]) + junk + encode(entries[2:])
    reader = EntryReader(data)
    assert list(reader) == entries
    assert [(d.position, d.length_bytes) for d in reader.damages] == [
        (len(encode(entries[:2])), len(junk))
    ]


def test_tombstone_and_empty_values_differ() -> None:
    data = encode_entry(0, 0, b"k", None) + encode_entry(1, 0, b"k", b"")
    got = list(EntryReader(data))
    assert got[0].value is None
    assert got[1].value == b""
    assert len(encode_entry(0, 0, b"", None)) == HEADER_BYTES


@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    reader = EntryReader(data)
    list(reader)
    assert 0 <= reader.valid_end <= len(data)


@given(st.lists(st.tuples(st.binary(max_size=10), st.none() | st.binary(max_size=10))), st.data())
def test_random_corruption_keeps_every_entry_that_was_not_touched(
    kvs: list[tuple[bytes, bytes | None]], data: st.DataObject
) -> None:
    entries = [Entry(i, i, k, v) for i, (k, v) in enumerate(kvs)]
    blob = bytearray(encode(entries))
    if not blob:
        return
    pos = data.draw(st.integers(0, len(blob) - 1))
    blob[pos] ^= data.draw(st.integers(1, 255))
    got = list(EntryReader(bytes(blob)))
    spans = []
    at = 0
    for e in entries:
        size = len(encode_entry(*e))
        spans.append((at, at + size))
        at += size
    untouched = [e for e, (a, b) in zip(entries, spans, strict=True) if not a <= pos < b]
    assert got == untouched

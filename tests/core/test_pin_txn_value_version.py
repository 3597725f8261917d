"""A pending transactional offset's value of an unknown version is refused with a message that
names it (the loader logs it with the record's place in the log), pinned where `make mutation`
found the message loose (issue 36: `record_codec.decode_txn_offset_value`)."""

from __future__ import annotations

import struct

import pytest

from coordinator.core.record_codec import RecordDecodeError, decode_txn_offset_value


def test_an_unknown_txn_offset_value_version_is_named() -> None:
    with pytest.raises(RecordDecodeError, match=r"^unknown TxnOffsetValue version 3$"):
        decode_txn_offset_value(struct.pack(">h", 3) + b"\x00" * 32)

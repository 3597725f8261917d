"""groupcoord's own security records (types 101 and 102, coordinator/core/records.py), pinned
byte for byte where mutation testing found them loose (issue 28, `make mutation`): their tests
under tests/security run whole servers, which `make mutation` does not.

The bytes are built here field by field from the records' documented layout (big-endian; int8
codes, Kafka's int16-length strings, int32-length bytes; a value starts with its int16 version,
0), then encoded, decoded and replayed through `decode_record` both ways, and the damaged forms
are refused with what is wrong; replayed, they reach the core's security state.
"""

from __future__ import annotations

import struct

import pytest

from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.record_codec import (
    RecordDecodeError,
    decode_key,
    decode_record,
    encode_key,
    encode_record,
    encode_value,
)
from coordinator.core.records import (
    AclKey,
    AclValue,
    Record,
    ScramCredentialKey,
    ScramCredentialValue,
)
from coordinator.core.security import acl_key
from tests.support.fakeclock import EPOCH, catalog


def string(s: str) -> bytes:
    data = s.encode()
    return struct.pack(">h", len(data)) + data


def blob(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


ACL = AclKey(2, "orders-é", 3, "User:alice", "*", 4, -1)  # negative int8 codes are kept
ACL_KEY = (
    struct.pack(">hb", 101, 2) + string("orders-é") + struct.pack(">b", 3) + string("User:alice")
    + string("*") + struct.pack(">bb", 4, -1)
)  # fmt: skip
SCRAM = ScramCredentialKey("alice", 2)
SCRAM_KEY = struct.pack(">h", 102) + string("alice") + struct.pack(">b", 2)
CREDENTIAL = ScramCredentialValue(b"salt", b"stored-key", b"server-key!", 8192)
CREDENTIAL_VALUE = (
    struct.pack(">h", 0) + blob(b"salt") + blob(b"stored-key") + blob(b"server-key!")
    + struct.pack(">i", 8192)
)  # fmt: skip


def test_the_acl_record_is_its_documented_layout() -> None:
    assert encode_key(ACL) == ACL_KEY
    assert encode_value(AclValue()) == struct.pack(">h", 0)
    assert decode_key(ACL_KEY) == ACL
    assert decode_record(ACL_KEY, struct.pack(">h", 0)) == Record(ACL, AclValue())
    assert decode_record(ACL_KEY, None) == Record(ACL, None)
    assert encode_record(Record(ACL, AclValue())) == (ACL_KEY, struct.pack(">h", 0))


def test_the_scram_record_is_its_documented_layout() -> None:
    assert encode_key(SCRAM) == SCRAM_KEY
    assert encode_value(CREDENTIAL) == CREDENTIAL_VALUE
    assert decode_key(SCRAM_KEY) == SCRAM
    assert decode_record(SCRAM_KEY, CREDENTIAL_VALUE) == Record(SCRAM, CREDENTIAL)
    assert decode_record(SCRAM_KEY, None) == Record(SCRAM, None)


def test_damaged_security_records_are_refused_with_what_is_wrong() -> None:
    cases = [
        (ACL_KEY, struct.pack(">h", 1), r"^unknown AclValue version 1$"),
        (ACL_KEY, struct.pack(">h", 0) + b"x", r"^1 trailing bytes$"),
        (ACL_KEY[:-1], struct.pack(">h", 0), r"^truncated record$"),
        (ACL_KEY + b"xy", struct.pack(">h", 0), r"^2 trailing bytes$"),
        (SCRAM_KEY, struct.pack(">h", 3) + CREDENTIAL_VALUE[2:], r"^unknown ScramCredentialValue"),
        (SCRAM_KEY, CREDENTIAL_VALUE + b"z", r"^1 trailing bytes$"),
        (SCRAM_KEY, CREDENTIAL_VALUE[:-1], r"^truncated record$"),
        (SCRAM_KEY + b"z", CREDENTIAL_VALUE, r"^1 trailing bytes$"),
    ]
    for key, value, message in cases:
        with pytest.raises(RecordDecodeError, match=message):
            decode_record(key, value)


def test_security_key_strings_hold_at_most_32767_bytes() -> None:
    with pytest.raises(ValueError, match=r"^string longer than 32767 bytes$"):
        encode_key(ScramCredentialKey("u" * 0x8000, 1))
    for field in ("resource_name", "principal", "host"):
        fields = {"resource_name": "r", "principal": "p", "host": "h"} | {field: "x" * 0x8000}
        with pytest.raises(ValueError, match=r"^string longer than 32767 bytes$"):
            encode_key(AclKey(1, fields["resource_name"], 1, fields["principal"],
                              fields["host"], 1, 1))  # fmt: skip


def test_security_records_replay_into_the_core() -> None:
    allow = AclKey(2, "orders", 3, "User:alice", "*", 3, 3)  # TOPIC LITERAL READ ALLOW
    core = GroupCoordinator(CoordinatorConfig(), catalog(), lambda prefix: prefix, EPOCH)
    core.replay(Record(allow, AclValue()))
    core.replay(Record(SCRAM, CREDENTIAL))
    security = core.state.security
    assert [acl_key(a) for a in security.authorizer.acls()] == [allow]
    stored = security.credentials.get("alice", "SCRAM-SHA-512")
    assert stored is not None and (stored.salt, stored.iterations) == (b"salt", 8192)
    core.replay(Record(allow, None))
    assert len(security.authorizer) == 0

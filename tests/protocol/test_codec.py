"""protocol.codec and protocol.apis: headers, every advertised version, tagged fields, fuzz."""

from __future__ import annotations

import contextlib
import io
import struct
from dataclasses import MISSING, fields
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.request_header.v1.header import RequestHeader as KioRequestHeaderV1
from kio.schema.request_header.v2.header import RequestHeader as KioRequestHeaderV2
from kio.serial import entity_reader, entity_writer
from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial._serialize import get_field_writer
from kio.serial.writers import write_int8, write_int32, write_unsigned_varint
from kio.static.primitive import Records, i64Timedelta

from protocol import apis, codec
from protocol.apis import API_TABLE, API_VERSIONS, HEARTBEAT
from protocol.codec import (
    ApiVersionsUnsupported,
    CodecError,
    MalformedRequest,
    RequestHeader,
    UnsupportedVersion,
    decode_request,
    encode_response,
)
from protocol.tagged import lenient_entity_reader

st.register_type_strategy(Records, st.binary(max_size=32))
# kio's native reader converts int64 ms through int64 microseconds, so |ms| >= 2**63 / 1000
# overflows ("timedelta milliseconds overflow"), and kio's writer goes through float seconds, which
# loses milliseconds beyond 2**43. No client sends such retention times (they send -1).
st.register_type_strategy(
    i64Timedelta,
    st.integers(-(2**40), 2**40).map(lambda ms: i64Timedelta.parse(timedelta(milliseconds=ms))),
)

ALL_VERSIONS = [
    (spec.api_key, version)
    for spec in API_TABLE
    for version in range(spec.min_version, spec.max_version + 1)
]
EXAMPLES = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def write(entity: object) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)  # type: ignore[type-var]
    return buffer.getvalue()


def request_frame(
    api_key: int, version: int, body: bytes, correlation_id: int = 7, client_id: str | None = "c"
) -> bytes:
    header: object
    if apis.is_flexible(api_key, version):
        header = KioRequestHeaderV2(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        )
    else:
        header = KioRequestHeaderV1(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        )
    return write(header) + body


def read_response(data: bytes, api_key: int, version: int) -> tuple[int, object]:
    (size, correlation_id) = struct.unpack_from(">ii", data, 0)
    assert size == len(data) - 4
    offset = 8
    if apis.is_flexible(api_key, version) and api_key != API_VERSIONS:
        assert data[offset] == 0  # response header v1: no tagged fields
        offset += 1
    cls = apis.response_class(api_key, version)
    entity, consumed = entity_reader(cls)(data, offset)
    assert offset + consumed == len(data)
    return correlation_id, entity


# --------------------------------------------------------------------------------------------------
# The API table


def test_table_matches_kio_flexible_versions() -> None:
    for api_key, version in ALL_VERSIONS:
        flexible = apis.is_flexible(api_key, version)
        assert apis.request_class(api_key, version).__flexible__ == flexible
        assert apis.response_class(api_key, version).__flexible__ == flexible
        assert apis.request_class(api_key, version).__version__ == version


def test_advertised_ranges() -> None:
    ranges = {key: (low, high) for key, low, high in apis.supported_ranges()}
    assert ranges == {
        18: (0, 4), 3: (0, 12), 10: (0, 6), 11: (0, 9), 14: (0, 5), 12: (0, 4), 13: (0, 5),
        8: (2, 9), 9: (1, 9), 47: (0, 0), 15: (0, 6), 16: (0, 5), 42: (0, 2), 2: (1, 7),
        0: (3, 11), 1: (4, 12), 19: (2, 7), 20: (1, 6), 37: (0, 3),
        17: (1, 1), 36: (0, 2), 29: (1, 3), 30: (1, 3), 31: (1, 3), 50: (0, 0), 51: (0, 0),
        68: (0, 1), 69: (0, 1),  # KIP-848 (issue 23): Java 3.9 sends v0, librdkafka 2.16 v1
        76: (1, 1), 77: (1, 1),  # KIP-932 share groups: v1 only, as Kafka 4.1-4.4
        90: (0, 1), 91: (0, 0), 92: (0, 0),  # KIP-932 share offsets admin: Kafka 4.4's
        32: (1, 4), 44: (0, 1),  # the GROUP config resource: Kafka 4.4's ranges
    }  # fmt: skip
    assert {8, 9, 11, 12, 13, 14, 15, 16, 42, 47} == apis.GROUP_APIS
    assert {68, 69} == apis.CONSUMER_GROUP_APIS
    assert {76, 77, 90, 91, 92} == apis.SHARE_GROUP_APIS


@pytest.mark.parametrize("version", range(5))
def test_api_versions_derived_from_table(version: int) -> None:
    cls = apis.request_class(API_VERSIONS, version)
    request = (
        cls(client_software_name="apache-kafka-java", client_software_version="3.9.0")
        if version >= 3
        else cls()
    )
    header = RequestHeader(API_VERSIONS, version, 5, "c")
    data = encode_response(header, codec.api_versions_response(header, request))
    correlation_id, response = read_response(data, API_VERSIONS, version)
    assert correlation_id == 5
    assert response.error_code == ErrorCode.none  # type: ignore[attr-defined]
    got = {(k.api_key, k.min_version, k.max_version) for k in response.api_keys}  # type: ignore[attr-defined]
    assert got == set(apis.supported_ranges())


@pytest.mark.parametrize(
    ("name", "version", "ok"),
    [
        ("librdkafka", "2.16.0", True),
        ("apache-kafka-java", "3.9.0-SNAPSHOT", True),
        ("", "1.0", False),
        ("bad name", "1.0", False),
        ("-lead", "1.0", False),
        ("ok", "trailing.", False),
    ],
)
def test_api_versions_v3_client_software(name: str, version: str, ok: bool) -> None:
    cls = apis.request_class(API_VERSIONS, 3)
    header = RequestHeader(API_VERSIONS, 3, 1, "c")
    response: Any = codec.api_versions_response(
        header, cls(client_software_name=name, client_software_version=version)
    )
    assert response.error_code == (ErrorCode.none if ok else ErrorCode.invalid_request)
    assert (len(response.api_keys) > 0) == ok


def test_api_versions_too_new() -> None:
    frame = struct.pack(">hhih", API_VERSIONS, 99, 42, 1) + b"x" + b"\x00garbage"
    with pytest.raises(ApiVersionsUnsupported) as info:
        decode_request(frame)
    header = info.value.header
    assert (header.api_version, header.correlation_id, header.client_id) == (99, 42, "x")
    data = codec.encode_api_versions_unsupported(header)
    correlation_id, response = read_response(data, API_VERSIONS, 0)
    assert correlation_id == 42
    assert response.error_code == ErrorCode.unsupported_version  # type: ignore[attr-defined]
    assert [(k.api_key, k.min_version, k.max_version) for k in response.api_keys] == [(18, 0, 4)]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("api_key", "version"), [(11, 10), (8, 1), (9, 0), (0, 2), (0, 12), (999, 0), (12, -1)]
)
def test_unsupported_versions_close(api_key: int, version: int) -> None:
    frame = struct.pack(">hhih", api_key, version, 3, -1)
    with pytest.raises(UnsupportedVersion) as info:
        decode_request(frame)
    assert not isinstance(info.value, ApiVersionsUnsupported)
    assert info.value.header == RequestHeader(api_key, version, 3, "")


# --------------------------------------------------------------------------------------------------
# Headers


def heartbeat_body(version: int) -> bytes:
    cls = apis.request_class(HEARTBEAT, version)
    kwargs: dict[str, Any] = {"group_id": "g", "generation_id": 3, "member_id": "m"}
    if version >= 3:
        kwargs["group_instance_id"] = None
    return write(cls(**kwargs))


@pytest.mark.parametrize("client_id", [None, "", "consumer-1", "ünïcode"])
@pytest.mark.parametrize("version", [0, 3, 4])
def test_header_client_id(version: int, client_id: str | None) -> None:
    frame = request_frame(HEARTBEAT, version, heartbeat_body(version), 99, client_id)
    header, request = decode_request(frame)
    assert header == RequestHeader(HEARTBEAT, version, 99, client_id or "")
    assert request.group_id == "g"  # type: ignore[attr-defined]


def test_header_v2_tagged_fields_skipped() -> None:
    head = struct.pack(">hhih", HEARTBEAT, 4, 1, 2) + b"id"
    tags = bytes([2, 0, 3, 1, 2, 3, 7, 0])  # two header tags: tag 0 (3 bytes), tag 7 (empty)
    header, request = decode_request(head + tags + heartbeat_body(4))
    assert header == RequestHeader(HEARTBEAT, 4, 1, "id")
    assert request.member_id == "m"  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x0c\x00\x04",
        struct.pack(">hhih", HEARTBEAT, 0, 1, 5) + b"ab",
        struct.pack(">hhih", HEARTBEAT, 0, 1, -2),
        struct.pack(">hhih", HEARTBEAT, 4, 1, -1),  # no tagged-field section
        struct.pack(">hhih", HEARTBEAT, 4, 1, -1) + b"\x01\x00\x05ab",
        struct.pack(">hhih", HEARTBEAT, 0, 1, -1) + b"\x00",
    ],
)
def test_malformed(frame: bytes) -> None:
    with pytest.raises(MalformedRequest):
        decode_request(frame)


def test_null_in_a_non_nullable_field_is_malformed() -> None:
    """OffsetFetch v1's topics may not be null (null means every topic from v2 on): Kafka 4.4
    closes the connection ("non-nullable field topics was serialized as null"); so do we,
    instead of answering with every topic (found by tests/conformance)."""
    body = struct.pack(">h", 1) + b"g" + struct.pack(">i", -1)
    with pytest.raises(MalformedRequest, match="non-nullable field topics"):
        decode_request(request_frame(9, 1, body))
    _, request = decode_request(request_frame(9, 2, body))  # v2: null is every topic
    assert request.topics is None  # type: ignore[attr-defined]


# --------------------------------------------------------------------------------------------------
# Round trips for every advertised version


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
@EXAMPLES
@given(data=st.data())
def test_request_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    cls = apis.request_class(api_key, version)
    request = data.draw(st.from_type(cls))
    correlation_id = data.draw(st.integers(-(2**31), 2**31 - 1))
    frame = request_frame(api_key, version, write(request), correlation_id)
    header, decoded = decode_request(frame)
    assert header == RequestHeader(api_key, version, correlation_id, "c")
    assert decoded == request


@pytest.mark.parametrize(("api_key", "version"), ALL_VERSIONS)
@EXAMPLES
@given(data=st.data())
def test_response_round_trip(api_key: int, version: int, data: st.DataObject) -> None:
    cls = apis.response_class(api_key, version)
    response = data.draw(st.from_type(cls))
    header = RequestHeader(api_key, version, data.draw(st.integers(-(2**31), 2**31 - 1)), "c")
    correlation_id, decoded = read_response(encode_response(header, response), api_key, version)
    assert correlation_id == header.correlation_id
    assert decoded == response


def test_encode_response_refuses_wrong_class() -> None:
    header = RequestHeader(HEARTBEAT, 4, 1, "c")
    wrong = apis.response_class(HEARTBEAT, 3)(throttle_time=timedelta(0), error_code=ErrorCode.none)
    with pytest.raises(TypeError):
        encode_response(header, wrong)


@pytest.mark.parametrize("version", range(5))
@pytest.mark.parametrize("error", [ErrorCode.none, ErrorCode.rebalance_in_progress])
def test_heartbeat_fast_path_matches_generic(version: int, error: ErrorCode) -> None:
    header = RequestHeader(HEARTBEAT, version, 12345, "c")
    fast = codec.encode_heartbeat_response(header, error)
    correlation_id, decoded = read_response(fast, HEARTBEAT, version)
    assert correlation_id == 12345
    assert decoded.error_code == error  # type: ignore[attr-defined]
    cls = apis.response_class(HEARTBEAT, version)
    body = write(
        cls(error_code=error) if version == 0 else cls(throttle_time=timedelta(0), error_code=error)
    )
    assert fast.endswith(body)


# --------------------------------------------------------------------------------------------------
# Unknown tagged fields (KIP-482): skipped at every nesting level


def _known_tags(entity_type: type) -> set[int]:
    return {int(t) for f in fields(entity_type) if (t := get_field_tag(f)) is not None}


def write_with_unknown_tags(entity: Any, draw_tags: Any, out: io.BytesIO) -> None:
    """kio's encoding of `entity`, plus unknown tags from draw_tags(known) in each tag section."""
    entity_type = type(entity)
    flexible = entity_type.__flexible__
    tagged: list[tuple[int, bytes]] = []
    for field in fields(entity_type):
        value = getattr(entity, field.name)
        tag = get_field_tag(field)
        if tag is None:
            _write_field(field, value, flexible, draw_tags, out)
            continue
        default = field.default if field.default is not MISSING else None
        if value == default or value == get_tagged_field_default(field):
            continue
        inner = io.BytesIO()
        _write_field(field, value, flexible, draw_tags, inner, is_tag=True)
        tagged.append((int(tag), inner.getvalue()))
    if not flexible:
        return
    tagged.extend(draw_tags(_known_tags(entity_type)))
    tagged.sort()
    write_unsigned_varint(out, len(tagged))
    for tag, payload in tagged:
        write_unsigned_varint(out, tag)
        write_unsigned_varint(out, len(payload))
        out.write(payload)


def _write_field(
    field: Any, value: Any, flexible: bool, draw_tags: Any, out: io.BytesIO, is_tag: bool = False
) -> None:
    kind = classify_field(field)
    if isinstance(kind, EntityField):
        if not is_tag and is_optional(field):
            write_int8(out, -1 if value is None else 1)
            if value is None:
                return
        write_with_unknown_tags(value, draw_tags, out)
    elif isinstance(kind, EntityTupleField):
        if value is None:
            write_unsigned_varint(out, 0) if flexible else write_int32(out, -1)
            return
        write_unsigned_varint(out, len(value) + 1) if flexible else write_int32(out, len(value))
        for item in value:
            write_with_unknown_tags(item, draw_tags, out)
    else:
        get_field_writer(field, flexible, False, is_tag)(out, value)


FLEXIBLE_REQUESTS = [(k, v) for k, v in ALL_VERSIONS if apis.is_flexible(k, v)]


@pytest.mark.parametrize(("api_key", "version"), FLEXIBLE_REQUESTS)
@EXAMPLES
@given(data=st.data())
def test_unknown_tagged_fields_skipped(api_key: int, version: int, data: st.DataObject) -> None:
    cls = apis.request_class(api_key, version)
    request = data.draw(st.from_type(cls))

    def draw_tags(known: set[int]) -> list[tuple[int, bytes]]:
        tags = data.draw(
            st.dictionaries(
                st.integers(0, 2**31 - 1).filter(lambda t: t not in known),
                st.binary(max_size=12),
                max_size=3,
            )
        )
        return list(tags.items())

    out = io.BytesIO()
    write_with_unknown_tags(request, draw_tags, out)
    body = out.getvalue()
    # Without injected tags this writer must agree with kio's, byte for byte.
    plain = io.BytesIO()
    write_with_unknown_tags(request, lambda known: [], plain)
    assert plain.getvalue() == write(request)
    decoded, consumed = lenient_entity_reader(cls)(body, 0)
    assert decoded == request and consumed == len(body)
    _, via_codec = decode_request(request_frame(api_key, version, body))
    assert via_codec == request


def test_unknown_tag_nested_join_group_protocol() -> None:
    cls = apis.request_class(11, 9)
    protocol_cls = apis.request_module(11, 9).JoinGroupRequestProtocol
    request = cls(
        group_id="g",
        session_timeout=timedelta(seconds=10),
        rebalance_timeout=timedelta(seconds=30),
        member_id="",
        group_instance_id=None,
        protocol_type="consumer",
        protocols=(protocol_cls(name="range", metadata=b"\x01"),),
        reason=None,
    )
    out = io.BytesIO()
    calls = iter([[(5, b"xyz")], [(0, b"")]])  # nested struct first, then the top level
    write_with_unknown_tags(request, lambda known: next(calls), out)
    with pytest.raises(KeyError):
        entity_reader(cls)(out.getvalue(), 0)  # kio alone refuses it
    _, decoded = decode_request(request_frame(11, 9, out.getvalue()))
    assert decoded == request


# --------------------------------------------------------------------------------------------------
# Fuzz: garbage closes the connection, nothing else


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=64))
def test_fuzz_arbitrary_bytes(frame: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode_request(frame)


@settings(max_examples=500, deadline=None)
@given(
    key_version=st.sampled_from(ALL_VERSIONS),
    body=st.binary(max_size=80),
)
def test_fuzz_valid_header_random_body(key_version: tuple[int, int], body: bytes) -> None:
    api_key, version = key_version
    with contextlib.suppress(MalformedRequest):
        decode_request(request_frame(api_key, version, body))

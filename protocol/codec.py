"""Frames <-> (RequestHeader, kio request) and (RequestHeader, kio response) -> bytes.

Invariants:
- The request header is parsed by hand (it is on every request): v1 = api_key int16, api_version
  int16, correlation_id int32, client_id as a classic int16-length nullable string (never compact,
  even in v2); v2 appends a tagged-field section, which is skipped. A null client id becomes "",
  as the broker does. Header v2 is used exactly when the API version is flexible
  (docs/protocol.md §1.1).
- An (api_key, version) outside `apis.API_TABLE` raises UnsupportedVersion and the server closes
  the connection without a reply, as Kafka's Processor does. ApiVersions is the exception (KIP-511,
  §1.3): it raises `ApiVersionsUnsupported`, and `encode_api_versions_unsupported` gives the v0
  UNSUPPORTED_VERSION reply that lets the client retry with a version we know.
- Bodies with arrays are pre-scanned by `protocol.guard` (kio's native reader would abort the
  process on a huge claimed array length). Any failure to parse a body raises MalformedRequest
  (never anything else): a peer sending garbage closes its own connection only. Unknown tagged
  fields are not garbage (KIP-482): kio's native reader refuses them, so the codec retries with
  `protocol.tagged`'s lenient reader.
- Responses carry header v1 when the API version is flexible, v0 otherwise; ApiVersions responses
  always carry v0 (KIP-511).
- `encode_request` and `decode_response` are the other direction, for the sidecar fleet, which
  re-sends parts of a batched group request to its peers and merges their answers.
"""

from __future__ import annotations

import io
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any, Final, get_args

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta

from . import apis
from .apis import API_VERSIONS, APIS, HEARTBEAT
from .fastpath import decode_client_id
from .frozen import fast_init
from .guard import Scan, scanner_for
from .tagged import lenient_entity_reader
from .varint import VarintError, skip_tagged_fields

__all__ = [
    "ApiVersionsUnsupported",
    "CodecError",
    "DecodeError",
    "MalformedRequest",
    "MalformedResponse",
    "RequestHeader",
    "UnsupportedVersion",
    "api_versions_response",
    "decode_request",
    "decode_response",
    "encode_api_versions_unsupported",
    "encode_heartbeat_response",
    "encode_request",
    "encode_response",
    "parse_request_header",
    "valid_client_software",
]

_HEADER_V1: Final = struct.Struct(">hhih")
_SIZE: Final = struct.Struct(">i")
_SIZE_AND_CORRELATION: Final = struct.Struct(">ii")
_ZERO_THROTTLE: Final = i32Timedelta.parse(timedelta(0))


@fast_init
@dataclass(frozen=True, slots=True)
class RequestHeader:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str  # a null client id is "" (RequestHeader.java)


class CodecError(Exception):
    """The peer sent something we cannot answer; close the connection."""


class MalformedRequest(CodecError):
    """The header or body could not be parsed."""


class MalformedResponse(CodecError):
    """A response (from a sidecar fleet peer) could not be parsed."""


# What the server catches after UnsupportedVersion: any other reason to drop the connection.
DecodeError = CodecError


class UnsupportedVersion(CodecError):
    """(api_key, api_version) is not in the API table; Kafka closes the connection."""

    def __init__(self, header: RequestHeader) -> None:
        super().__init__(f"unsupported api {header.api_key} v{header.api_version}")
        self.header = header


class ApiVersionsUnsupported(UnsupportedVersion):
    """ApiVersions at a version we do not know: reply `encode_api_versions_unsupported(header)`."""


# --------------------------------------------------------------------------------------------------
# Requests


def _skip_tagged_fields(frame: bytes | memoryview, offset: int) -> int:
    try:
        return skip_tagged_fields(frame, offset)
    except VarintError as exc:
        raise MalformedRequest(f"request header: {exc}") from None


def _parse_header_v1(frame: bytes | memoryview) -> tuple[RequestHeader, int]:
    if len(frame) < _HEADER_V1.size:
        raise MalformedRequest("frame shorter than a request header")
    api_key, api_version, correlation_id, length = _HEADER_V1.unpack_from(frame, 0)
    offset = _HEADER_V1.size
    if length < 0:
        if length != -1:
            raise MalformedRequest(f"invalid client id length {length}")
        client_id = ""
    else:
        end = offset + length
        if end > len(frame):
            raise MalformedRequest("client id runs past the end of the frame")
        client_id = decode_client_id(bytes(frame[offset:end]))
        offset = end
    return RequestHeader(api_key, api_version, correlation_id, client_id), offset


def parse_request_header(frame: bytes | memoryview) -> tuple[RequestHeader, int]:
    """The header and the offset of the body. Raises UnsupportedVersion / MalformedRequest."""
    header, offset = _parse_header_v1(frame)
    spec = APIS.get(header.api_key)
    if spec is None or not spec.min_version <= header.api_version <= spec.max_version:
        if header.api_key == API_VERSIONS:
            raise ApiVersionsUnsupported(header)
        raise UnsupportedVersion(header)
    if spec.flexible(header.api_version):
        offset = _skip_tagged_fields(frame, offset)
    return header, offset


_Reader = Callable[[Any, int], tuple[Any, int]]
_Readers = tuple[_Reader, _Reader, Scan | None, tuple[str, ...]]
_readers: dict[tuple[int, int], _Readers] = {}


def _request_readers(api_key: int, api_version: int) -> _Readers:
    readers = _readers.get((api_key, api_version))
    if readers is None:
        cls = apis.request_class(api_key, api_version)
        readers = (entity_reader(cls), lenient_entity_reader(cls), scanner_for(cls),
                   _non_nullable(cls))  # fmt: skip
        _readers[api_key, api_version] = readers
    return readers


def _non_nullable(cls: type) -> tuple[str, ...]:
    """The request's top-level fields that may not be null in this version (kio's reader takes a
    null array or string for any field; Kafka's refuses one that is not nullable in the version,
    "non-nullable field topics was serialized as null", and closes the connection)."""
    return tuple(f.name for f in fields(cls) if type(None) not in get_args(f.type))


def decode_request(frame: bytes | memoryview) -> tuple[RequestHeader, object]:
    """Parse one frame (without its size prefix) into the header and the kio request entity.

    Trailing bytes after the body are ignored, as Kafka's parser does.
    Raises UnsupportedVersion (ApiVersionsUnsupported for ApiVersions) or MalformedRequest.
    """
    header, offset = parse_request_header(frame)
    native, lenient, scan, non_nullable = _request_readers(header.api_key, header.api_version)
    try:
        if scan is not None:
            # kio's native reader aborts the process on a huge array length (see protocol.guard).
            scan(frame, offset, len(frame))
        request, _ = native(frame, offset)
    except KeyError:
        # kio's native reader refuses unknown tagged fields; KIP-482 says skip them.
        try:
            request, _ = lenient(frame, offset)
        except Exception as exc:
            raise MalformedRequest(f"api {header.api_key} v{header.api_version}: {exc}") from exc
    except Exception as exc:
        raise MalformedRequest(f"api {header.api_key} v{header.api_version}: {exc}") from exc
    for name in non_nullable:
        if getattr(request, name) is None:
            raise MalformedRequest(
                f"api {header.api_key} v{header.api_version}: non-nullable field {name} was null"
            )
    return header, request


# --------------------------------------------------------------------------------------------------
# Responses

_Writer = Callable[[Any, Any], None]
# (api_key, version) -> (response class, writer, response header is v1)
_writers: dict[tuple[int, int], tuple[type, _Writer, bool]] = {}


def _response_writer(api_key: int, api_version: int) -> tuple[type, _Writer, bool]:
    entry = _writers.get((api_key, api_version))
    if entry is None:
        cls = apis.response_class(api_key, api_version)
        header_v1 = api_key != API_VERSIONS and apis.is_flexible(api_key, api_version)
        entry = (cls, entity_writer(cls), header_v1)
        _writers[api_key, api_version] = entry
    return entry


def _frame(correlation_id: int, header_v1: bool, body: bytes) -> bytes:
    if header_v1:
        # Response header v1: correlation id, then an empty tagged-field section.
        return _SIZE_AND_CORRELATION.pack(len(body) + 5, correlation_id) + b"\x00" + body
    return _SIZE_AND_CORRELATION.pack(len(body) + 4, correlation_id) + body


def encode_body(entity: object) -> bytes:
    """The kio entity's bytes, without any header."""
    buffer = io.BytesIO()
    write: _Writer = entity_writer(type(entity))
    write(buffer, entity)
    return buffer.getvalue()


def encode_response(header: RequestHeader, response: object) -> bytes:
    """Size prefix + response header + body, for the request `header` answered by `response`."""
    cls, write, header_v1 = _response_writer(header.api_key, header.api_version)
    if type(response) is not cls:
        raise TypeError(f"{type(response).__qualname__} does not answer {cls.__qualname__}")
    if (
        header.api_key == HEARTBEAT
        and getattr(response, "throttle_time", _ZERO_THROTTLE) == _ZERO_THROTTLE
    ):
        return encode_heartbeat_response(header, response.error_code)  # type: ignore[attr-defined]
    buffer = io.BytesIO()
    write(buffer, response)
    return _frame(header.correlation_id, header_v1, buffer.getvalue())


def encode_request(header: RequestHeader, request: object) -> bytes:
    """Size prefix + request header + body: a frame `decode_request` reads back as (`header`,
    `request`). The sidecar fleet re-sends parts of a batched request this way; a null client id
    goes out as "" (it was read as "")."""
    flexible = apis.is_flexible(header.api_key, header.api_version)
    client = header.client_id.encode()
    head = _HEADER_V1.pack(header.api_key, header.api_version, header.correlation_id, len(client))
    body = head + client + (b"\x00" if flexible else b"") + encode_body(request)
    return _SIZE.pack(len(body)) + body


def decode_response(header: RequestHeader, frame: bytes | memoryview) -> object:
    """The kio response entity in a framed response (size prefix included) to the request
    `header` names. Raises MalformedResponse."""
    cls, _, header_v1 = _response_writer(header.api_key, header.api_version)
    if len(frame) < 8:
        raise MalformedResponse("frame shorter than a response header")
    offset = 8
    response: object
    try:
        if header_v1:
            offset = skip_tagged_fields(frame, offset)
        scan = scanner_for(cls)
        if scan is not None:  # the native reader's huge-array abort, as for requests
            scan(frame, offset, len(frame))
        response, _ = entity_reader(cls)(frame, offset)
    except KeyError:  # unknown tagged fields (KIP-482)
        try:
            response, _ = lenient_entity_reader(cls)(frame, offset)
        except Exception as exc:
            raise MalformedResponse(f"api {header.api_key} response: {exc}") from exc
    except Exception as exc:
        raise MalformedResponse(f"api {header.api_key} response: {exc}") from exc
    return response


_heartbeat_bodies: dict[tuple[int, ErrorCode], bytes] = {}


def encode_heartbeat_response(header: RequestHeader, error: ErrorCode) -> bytes:
    """The hot path: a Heartbeat response from precomputed body bytes per (version, error)."""
    return heartbeat_response_frame(header.api_version, header.correlation_id, error)


def heartbeat_response_frame(version: int, correlation_id: int, error: ErrorCode) -> bytes:
    body = _heartbeat_bodies.get((version, error))
    if body is None:
        cls = apis.response_class(HEARTBEAT, version)
        entity = (
            cls(error_code=error)
            if version == 0
            else cls(throttle_time=_ZERO_THROTTLE, error_code=error)
        )
        body = encode_body(entity)
        _heartbeat_bodies[version, error] = body
    return _frame(correlation_id, APIS[HEARTBEAT].flexible(version), body)


# --------------------------------------------------------------------------------------------------
# ApiVersions (18): derived from the API table

# KIP-511: ClientSoftwareName and -Version must match this (ApiVersionsRequest.isValid).
_SOFTWARE_PATTERN: Final = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")


def valid_client_software(name: str, version: str) -> bool:
    return (
        _SOFTWARE_PATTERN.fullmatch(name) is not None
        and _SOFTWARE_PATTERN.fullmatch(version) is not None
    )


_api_keys_cache: dict[int, tuple[object, ...]] = {}


def _api_keys(version: int) -> tuple[object, ...]:
    keys = _api_keys_cache.get(version)
    if keys is None:
        api_version_cls = apis.response_module(API_VERSIONS, version).ApiVersion
        keys = tuple(
            api_version_cls(api_key=key, min_version=low, max_version=high)
            for key, low, high in apis.supported_ranges()
        )
        _api_keys_cache[version] = keys
    return keys


def _api_versions(version: int, error: ErrorCode, api_keys: tuple[object, ...]) -> object:
    cls = apis.response_class(API_VERSIONS, version)
    if version == 0:
        return cls(error_code=error, api_keys=api_keys)
    return cls(error_code=error, api_keys=api_keys, throttle_time=_ZERO_THROTTLE)


def api_versions_response(header: RequestHeader, request: object) -> object:
    """The ApiVersions response for a supported version: the table, or INVALID_REQUEST when a v3+
    client software name or version is malformed (KIP-511; the ApiKeys are then empty)."""
    version = header.api_version
    if version >= 3 and not valid_client_software(
        request.client_software_name,  # type: ignore[attr-defined]
        request.client_software_version,  # type: ignore[attr-defined]
    ):
        return _api_versions(version, ErrorCode.invalid_request, ())
    return _api_versions(version, ErrorCode.none, _api_keys(version))


def encode_api_versions_unsupported(header: RequestHeader) -> bytes:
    """The reply to ApiVersions at an unknown version (§1.3): a v0 body with UNSUPPORTED_VERSION and
    only the ApiVersions entry, so the client retries with a version in that range."""
    spec = APIS[API_VERSIONS]
    entry_cls = apis.response_module(API_VERSIONS, 0).ApiVersion
    entry = entry_cls(
        api_key=API_VERSIONS, min_version=spec.min_version, max_version=spec.max_version
    )
    body = encode_body(_api_versions(0, ErrorCode.unsupported_version, (entry,)))
    return _frame(header.correlation_id, False, body)

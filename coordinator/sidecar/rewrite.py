"""Sidecar mode's byte-level work: split frames, read request headers, and rewrite the few upstream
responses that carry broker addresses. Pure: no sockets, no clock.

What is parsed, and why (everything else passes through as opaque bytes):
- Every request: size, api_key, api_version, correlation_id (the fixed start of every request
  header), to route it. Produce also has its `acks` read, because acks=0 gets no response (Kafka's
  ProduceRequest: the broker sends nothing back), and the sidecar must not wait for one.
- Every response: its correlation id, to check it answers the request we think it does.
- Metadata, DescribeCluster and FindCoordinator (non-group keys) responses: decoded with kio and
  re-encoded with each broker's host and port replaced by the sidecar's listener for that broker,
  so a client never learns an upstream address (a Kafka proxy's port-per-broker mapping).

ApiVersions is answered by the sidecar (`api_version_ranges`): the upstream's ranges, except
- the classic-group APIs and FindCoordinator, which groupcoord answers: groupcoord's own ranges
  (capped by the upstream's for FindCoordinator, whose non-group keys are forwarded);
- APIs whose responses are rewritten: capped at what the rewriting can decode;
- Produce and Fetch: capped below the versions that carry KIP-951 `NodeEndpoints` (Produce v10,
  Fetch v16), which would leak upstream addresses inside responses we pass through untouched;
  Fetch and ListOffsets further to the versions groupcoord's codec reads (the refresh signal of
  coordinator.sidecar.refresh decodes them);
- TxnOffsetCommit: answered by groupcoord (coordinator.sidecar.txn), capped at the version it
  reads, within the upstream's range (the upstream must offer transactions);
- KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe: answered here (issue 23), at
  groupcoord's versions, whether or not the upstream offers them (tansu and Redpanda do not);
- group APIs groupcoord does not implement (share and streams groups): withheld, because
  forwarding them would create groups upstream that groupcoord cannot see. A client that sends
  one anyway is disconnected, as a broker does for an API it lacks.
"""

from __future__ import annotations

import importlib
import io
import struct
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from functools import cache
from typing import Any, Final, Protocol

from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i32Timedelta

from coordinator.core.topics import TopicInfo
from protocol import apis
from protocol.codec import valid_client_software
from protocol.framing import FrameTooLarge, InvalidFrameSize
from protocol.tagged import lenient_entity_reader
from protocol.varint import VarintError, read_uvarint, skip_tagged_fields

PRODUCE: Final = 0
FETCH: Final = 1
LIST_OFFSETS: Final = 2
METADATA: Final = 3
FIND_COORDINATOR: Final = 10
API_VERSIONS: Final = 18
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
CREATE_PARTITIONS: Final = 37
DESCRIBE_CLUSTER: Final = 60

# Group APIs groupcoord does not implement; forwarding them would coordinate groups upstream.
WITHHELD: Final = frozenset(
    {
        88,  # StreamsGroupHeartbeat (KIP-1071)
        89,  # StreamsGroupDescribe
    }
)

# KIP-932's ShareFetch and ShareAcknowledge, answered by the sidecar
# (coordinator.sidecar.share_fetch) at the versions Kafka 4.4
# offers (v0 was the early-access protocol, removed in Kafka 4.1).
SHARE_VERSIONS: Final = {78: (1, 2), 79: (1, 2)}

# Highest version the sidecar forwards or rewrites, where it is lower than the upstream's.
_KIO_NAMES: Final = {  # kio's module name and class name prefix for each API the sidecar reads
    LIST_OFFSETS: ("list_offsets", "ListOffsets"),
    METADATA: ("metadata", "Metadata"),
    FIND_COORDINATOR: ("find_coordinator", "FindCoordinator"),
    API_VERSIONS: ("api_versions", "ApiVersions"),
    DESCRIBE_CLUSTER: ("describe_cluster", "DescribeCluster"),
    DELETE_TOPICS: ("delete_topics", "DeleteTopics"),  # kio has v1-v6
    17: ("sasl_handshake", "SaslHandshake"),  # the sidecar's own SASL upstream
    36: ("sasl_authenticate", "SaslAuthenticate"),
    # Transactions (coordinator.sidecar.txn): answered, rewritten or observed on their way.
    9: ("offset_fetch", "OffsetFetch"),
    22: ("init_producer_id", "InitProducerId"),
    25: ("add_offsets_to_txn", "AddOffsetsToTxn"),
    26: ("end_txn", "EndTxn"),
    28: ("txn_offset_commit", "TxnOffsetCommit"),
    27: ("write_txn_markers", "WriteTxnMarkers"),  # the fleet's outcome notices, member to member
    65: ("describe_transactions", "DescribeTransactions"),  # the txn witness's, where offered
    78: ("share_fetch", "ShareFetch"),  # answered here: coordinator.sidecar.share_fetch
    79: ("share_acknowledge", "ShareAcknowledge"),
}
VERSION_CAPS: Final = {
    PRODUCE: 9,  # v10 adds NodeEndpoints (KIP-951)
    # Fetch v16 adds NodeEndpoints (KIP-951); and the refresh signal (coordinator.sidecar.refresh)
    # decodes Fetch and ListOffsets with groupcoord's codec: its versions.
    FETCH: apis.APIS[FETCH].max_version,
    LIST_OFFSETS: apis.APIS[LIST_OFFSETS].max_version,
    METADATA: apis.APIS[METADATA].max_version,
    FIND_COORDINATOR: apis.APIS[FIND_COORDINATOR].max_version,
    API_VERSIONS: apis.APIS[API_VERSIONS].max_version,
    DESCRIBE_CLUSTER: 2,  # kio 0.6.5's newest
    # coordinator.sidecar.txn: TxnOffsetCommit v0-v4 (Java 3.9 sends v4, librdkafka 2.x v3; v5 is
    # KIP-890's transaction version 2); the observed/rewritten ones at kio's newest.
    28: 4,
    25: 4,
    26: 5,
    22: 6,
    # DescribeConfigs / IncrementalAlterConfigs: decoded here (GROUP resources are answered
    # here, coordinator.sidecar.connection), so groupcoord's versions (Kafka 4.4's).
    apis.DESCRIBE_CONFIGS: apis.APIS[apis.DESCRIBE_CONFIGS].max_version,
    apis.INCREMENTAL_ALTER_CONFIGS: apis.APIS[apis.INCREMENTAL_ALTER_CONFIGS].max_version,
}
# Topic-changing admin APIs: when one passes through, the topic cache is refreshed at once.
TOPIC_ADMIN: Final = frozenset({CREATE_TOPICS, DELETE_TOPICS, CREATE_PARTITIONS})

REQUEST_START: Final = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_SIZE: Final = struct.Struct(">i")
_I16: Final = struct.Struct(">h")
_SIZE_AND_CORRELATION: Final = struct.Struct(">ii")
_ZERO_THROTTLE: Final = i32Timedelta.parse(timedelta(0))
MIN_REQUEST_BYTES: Final = 10  # api_key, api_version, correlation_id, client_id length


class RewriteError(Exception):
    """An upstream response could not be decoded: treat the upstream as broken."""


# --------------------------------------------------------------------------------------------------
# Framing


class Sink(Protocol):
    """Where a streamed frame's bytes go, in order, as they arrive."""

    def write(self, piece: bytes) -> None: ...

    def end(self) -> None: ...


class FrameStream:
    """Splits a byte stream into frames (each WITH its 4-byte size prefix, so it can be passed on
    as is), and lets a large frame flow through without being held whole.

    For each frame, in order:
    - if it arrives whole in one read, `on_frame(frame)` gets it (without a copy when the read is
      exactly that frame);
    - otherwise, once its first `peek` bytes (or all of it, if shorter) are here,
      `on_start(data, pos, total)` is asked for a `Sink` (the frame starts at `data[pos]` and is
      `total` bytes long). A sink gets the frame's bytes as they arrive, then `end()`; with None,
      the frame is collected and handed to `on_frame` whole.
    Sizes are checked as soon as they are visible: negative ones, ones below `min_frame_bytes` and
    ones over `max_frame_bytes` raise FramingError, and the stream is unusable after that.
    """

    __slots__ = (
        "_chunks",
        "_head",
        "_left",
        "_max_frame_bytes",
        "_min_frame_bytes",
        "_peek",
        "_sink",
        "on_frame",
        "on_start",
    )

    def __init__(
        self,
        on_frame: Callable[[bytes], None],
        on_start: Callable[[bytes, int, int], Sink | None],
        max_frame_bytes: int,
        min_frame_bytes: int = 4,
        peek: int = 8,
    ) -> None:
        self.on_frame = on_frame
        self.on_start = on_start
        self._max_frame_bytes = max_frame_bytes
        self._min_frame_bytes = min_frame_bytes
        self._peek = peek
        self._head = b""  # the start of a frame, shorter than needed to decide about it
        self._left = 0  # bytes of the current frame still to come
        self._sink: Sink | None = None
        self._chunks: list[bytes] = []  # the current frame so far, when it is collected

    @property
    def buffered_bytes(self) -> int:
        return len(self._head) + sum(len(c) for c in self._chunks)

    def feed(self, data: bytes) -> None:
        if self._head:
            data = self._head + data
            self._head = b""
        pos = 0
        end = len(data)
        while pos < end:
            if self._left:
                take = min(self._left, end - pos)
                piece = data if take == end else data[pos : pos + take]
                pos += take
                self._left -= take
                sink = self._sink
                if sink is not None:
                    sink.write(piece)
                    if not self._left:
                        self._sink = None
                        sink.end()
                else:
                    self._chunks.append(piece)
                    if not self._left:
                        frame = b"".join(self._chunks)
                        self._chunks.clear()
                        self.on_frame(frame)
                continue
            avail = end - pos
            if avail < 4:
                self._head = data[pos:]
                return
            size: int = _SIZE.unpack_from(data, pos)[0]
            if size < self._min_frame_bytes:
                raise InvalidFrameSize(size)
            if size > self._max_frame_bytes:
                raise FrameTooLarge(size, self._max_frame_bytes)
            total = size + 4
            if avail >= total:
                frame = data if total == end else data[pos : pos + total]
                pos += total
                self.on_frame(frame)
                continue
            if avail < min(total, self._peek):
                self._head = data[pos:]
                return
            sink = self.on_start(data, pos, total)
            piece = data if pos == 0 else data[pos:]
            self._left = total - avail
            if sink is not None:
                self._sink = sink
                sink.write(piece)
            else:
                self._chunks.append(piece)
            return


# --------------------------------------------------------------------------------------------------
# Requests


def body_offset(frame: bytes, flexible_header: bool) -> int:
    """Where the body starts in a framed request (request header v1, or v2 when flexible)."""
    length: int = _I16.unpack_from(frame, 12)[0]
    offset = 14 + max(length, 0)
    if flexible_header:
        offset = skip_tagged_fields(frame, offset)
    return offset


def produce_acks(frame: bytes, version: int) -> int:
    """The `acks` of a framed Produce request (v3+: after the nullable transactional_id;
    v9+ flexible: compact strings and a v2 request header). Raises on a truncated frame."""
    flexible = version >= 9
    offset = body_offset(frame, flexible)
    if version >= 3:
        if flexible:
            length, offset = read_uvarint(frame, offset)
            offset += max(length - 1, 0)
        else:
            (length,) = _I16.unpack_from(frame, offset)
            offset += 2 + max(length, 0)
    acks: int = _I16.unpack_from(frame, offset)[0]
    return acks


# --------------------------------------------------------------------------------------------------
# Responses (kio entities for the APIs the sidecar reads)


@cache
def response_class(api_key: int, version: int) -> type:
    module, prefix = _KIO_NAMES[api_key]
    cls: type = getattr(
        importlib.import_module(f"kio.schema.{module}.v{version}.response"), f"{prefix}Response"
    )
    return cls


@cache
def request_class(api_key: int, version: int) -> type:
    module, prefix = _KIO_NAMES[api_key]
    cls: type = getattr(
        importlib.import_module(f"kio.schema.{module}.v{version}.request"), f"{prefix}Request"
    )
    return cls


def _nested(cls: type, name: str) -> Any:
    return getattr(importlib.import_module(cls.__module__), name)


def response_header_bytes(api_key: int, version: int) -> int:
    """Bytes after the size prefix before the body: correlation id, plus the empty tagged-field
    section of response header v1 (flexible versions, except ApiVersions: KIP-511)."""
    flexible = api_key != API_VERSIONS and response_class(api_key, version).__flexible__  # type: ignore[attr-defined]
    return 5 if flexible else 4


def decode_response(api_key: int, version: int, frame: bytes) -> Any:
    """The kio entity in a framed response. Raises RewriteError."""
    try:
        cls = response_class(api_key, version)
    except (KeyError, ImportError):
        raise RewriteError(f"api {api_key} v{version} responses are not read here") from None
    offset = 4 + response_header_bytes(api_key, version)
    if offset == 9:
        try:
            offset = skip_tagged_fields(frame, 8)  # the header's tagged fields: skipped
        except VarintError as exc:
            raise RewriteError(f"api {api_key} v{version} response header: {exc}") from None
    entity: Any
    try:
        entity, _ = entity_reader(cls)(frame, offset)
    except KeyError:  # an unknown tagged field (KIP-482): skip it
        try:
            entity, _ = lenient_entity_reader(cls)(frame, offset)
        except Exception as exc:
            raise RewriteError(f"api {api_key} v{version} response: {exc}") from exc
    except Exception as exc:
        raise RewriteError(f"api {api_key} v{version} response: {exc}") from exc
    return entity


def encode_response(correlation_id: int, api_key: int, version: int, entity: Any) -> bytes:
    buffer = io.BytesIO()
    entity_writer(type(entity))(buffer, entity)
    body = buffer.getvalue()
    if response_header_bytes(api_key, version) == 5:
        return _SIZE_AND_CORRELATION.pack(len(body) + 5, correlation_id) + b"\x00" + body
    return _SIZE_AND_CORRELATION.pack(len(body) + 4, correlation_id) + body


def response_correlation_id(frame: bytes) -> int:
    return int(_SIZE_AND_CORRELATION.unpack_from(frame, 0)[1])


def encode_request(entity: Any, correlation_id: int, client_id: str) -> bytes:
    """A framed request for a kio request entity (the sidecar's own requests upstream)."""
    cls = type(entity)
    client = client_id.encode()
    header = struct.pack(
        ">hhih",
        cls.__api_key__,
        cls.__version__,
        correlation_id,
        len(client),
    )
    header += client
    if cls.__flexible__:
        header += b"\x00"  # request header v2: empty tagged fields
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, entity)
    body = header + buffer.getvalue()
    return _SIZE.pack(len(body)) + body


# --------------------------------------------------------------------------------------------------
# Broker addresses

LocalAddress = Callable[[int], "tuple[str, int] | None"]  # upstream node id -> our listener


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    node_id: int
    host: str
    port: int
    rack: str | None = None


def metadata_brokers(response: Any) -> list[BrokerAddress]:
    return [
        BrokerAddress(b.node_id, b.host, b.port, getattr(b, "rack", None)) for b in response.brokers
    ]


def _mapped(brokers: Iterable[Any], local: LocalAddress, id_field: str) -> tuple[Any, ...]:
    out = []
    for broker in brokers:
        address = local(getattr(broker, id_field))
        if address is not None:  # a broker we cannot listen for is left out, never leaked
            out.append(replace(broker, host=address[0], port=address[1]))
    return tuple(out)


def _with(
    brokers: tuple[Any, ...], extra: Iterable[BrokerAddress], id_field: str
) -> tuple[Any, ...]:
    """`brokers` and, shaped like the first of them, the `extra` nodes (`serve --workers N`'s
    coordinator nodes: coordinator.sidecar.worker_nodes), without a rack."""
    if not brokers:
        return brokers
    template = brokers[0]
    rack = {"rack": None} if hasattr(template, "rack") else {}
    added = tuple(
        replace(template, **{id_field: b.node_id}, host=b.host, port=b.port, **rack) for b in extra
    )
    return brokers + added


def rewrite_metadata(
    version: int, frame: bytes, local: LocalAddress, extra: Iterable[BrokerAddress] = ()
) -> tuple[bytes, Any]:
    """(the framed response with our listeners as the brokers, the decoded upstream response)."""
    response = decode_response(METADATA, version, frame)
    brokers = _with(_mapped(response.brokers, local, "node_id"), extra, "node_id")
    rewritten = replace(response, brokers=brokers)
    return encode_response(response_correlation_id(frame), METADATA, version, rewritten), response


def rewrite_describe_cluster(
    version: int, frame: bytes, local: LocalAddress, extra: Iterable[BrokerAddress] = ()
) -> bytes:
    response = decode_response(DESCRIBE_CLUSTER, version, frame)
    brokers = _with(_mapped(response.brokers, local, "broker_id"), extra, "broker_id")
    rewritten = replace(response, brokers=brokers)
    return encode_response(response_correlation_id(frame), DESCRIBE_CLUSTER, version, rewritten)


def rewrite_find_coordinator(version: int, frame: bytes, local: LocalAddress) -> bytes:
    """A forwarded (transaction) FindCoordinator answer, pointed at our listener for that node;
    an unknown node becomes COORDINATOR_NOT_AVAILABLE, which clients retry."""
    response = decode_response(FIND_COORDINATOR, version, frame)

    def point(entry: Any) -> Any:
        if entry.error_code != ErrorCode.none:
            return entry
        address = local(entry.node_id)
        if address is None:
            return replace(
                entry,
                error_code=ErrorCode.coordinator_not_available,
                node_id=-1,
                host="",
                port=-1,
            )
        return replace(entry, host=address[0], port=address[1])

    if version < 4:
        rewritten = point(response)
    else:
        rewritten = replace(response, coordinators=tuple(point(c) for c in response.coordinators))
    return encode_response(response_correlation_id(frame), FIND_COORDINATOR, version, rewritten)


# --------------------------------------------------------------------------------------------------
# Topic metadata for the topic-hash cache


def topic_infos(response: Any) -> tuple[list[TopicInfo], list[str], dict[tuple[str, int], int]]:
    """From a Metadata response: (topics with an id, topics the upstream says do not exist,
    leader node id by (topic, partition)). Topics without an id (Metadata < v10) are left out."""
    racks = {b.node_id: getattr(b, "rack", None) for b in response.brokers}
    known: list[TopicInfo] = []
    missing: list[str] = []
    leaders: dict[tuple[str, int], int] = {}
    for topic in response.topics:
        if topic.error_code == ErrorCode.unknown_topic_or_partition and topic.name:
            missing.append(topic.name)
            continue
        if topic.error_code != ErrorCode.none or not topic.name:
            continue
        partitions = sorted(topic.partitions, key=lambda p: p.partition_index)
        for p in partitions:
            leaders[topic.name, p.partition_index] = p.leader_id
        topic_id = getattr(topic, "topic_id", None)
        if not isinstance(topic_id, uuid.UUID) or topic_id.int == 0:
            continue
        per_partition = tuple(
            tuple(sorted({r for n in p.replica_nodes if (r := racks.get(n))})) for p in partitions
        )
        known.append(
            TopicInfo(
                topic.name,
                topic_id,
                len(partitions),
                per_partition if any(per_partition) else (),
            )
        )
    return known, missing, leaders


def deleted_topics(version: int, frame: bytes, known: Mapping[str, TopicInfo]) -> list[str]:
    """The topics a framed DeleteTopics response says were deleted (error NONE), by name; a v6+
    answer naming only the id is matched against `known`. Raises RewriteError."""
    response = decode_response(DELETE_TOPICS, version, frame)
    by_id = {info.topic_id: name for name, info in known.items()}
    names = []
    for result in response.responses:
        if result.error_code != ErrorCode.none:
            continue
        name = result.name or by_id.get(getattr(result, "topic_id", None))  # type: ignore[arg-type]
        if name:
            names.append(name)
    return names


# --------------------------------------------------------------------------------------------------
# ApiVersions


Ranges = tuple[tuple[int, int, int], ...]


def api_version_ranges(
    upstream: Mapping[int, tuple[int, int]], answered_here: Iterable[int] = ()
) -> Ranges:
    """(api_key, min, max) the sidecar advertises, given the upstream ranges (module docstring);
    `answered_here`: the APIs a secured listener answers itself (SASL, the ACL and credential
    admin APIs), at groupcoord's versions whatever the upstream offers."""
    # KIP-848's 68/69 are answered here whether or not the upstream offers them (issue 23).
    # KIP-932's 76/77 likewise.
    local = (
        apis.GROUP_APIS
        | apis.CONSUMER_GROUP_APIS
        | apis.SHARE_GROUP_APIS
        | frozenset(answered_here)
    )
    out: dict[int, tuple[int, int]] = {}
    for key, (upstream_low, upstream_high) in upstream.items():
        if key in WITHHELD or key in local or key in SHARE_VERSIONS:
            continue
        low, high = upstream_low, upstream_high
        cap = VERSION_CAPS.get(key)
        if cap is not None:
            # groupcoord's floor where its codec decodes the API; Produce is forwarded with only
            # its acks peeked, so the upstream's floor stands.
            spec = apis.APIS.get(key) if key != PRODUCE else None
            low = max(low, spec.min_version) if spec is not None else low
            high = min(high, cap)
        if low <= high:
            out[key] = (low, high)
    for key in local:
        spec = apis.APIS[key]
        out[key] = (spec.min_version, spec.max_version)
    out.update(SHARE_VERSIONS)
    spec = apis.APIS[API_VERSIONS]
    out[API_VERSIONS] = (spec.min_version, spec.max_version)
    return tuple((key, low, high) for key, (low, high) in sorted(out.items()))


def parse_api_versions(frame: bytes, version: int) -> dict[int, tuple[int, int]]:
    response = decode_response(API_VERSIONS, version, frame)
    if response.error_code != ErrorCode.none:
        raise RewriteError(f"upstream ApiVersions error {response.error_code}")
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


@cache
def _api_keys(version: int, ranges: Ranges) -> tuple[object, ...]:
    entry = _nested(response_class(API_VERSIONS, version), "ApiVersion")
    return tuple(entry(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in ranges)


def api_versions_frame(correlation_id: int, version: int, request: Any, ranges: Ranges) -> bytes:
    """The sidecar's ApiVersions answer (KIP-511: INVALID_REQUEST for malformed v3+ software
    names, with no ApiKeys), framed with response header v0."""
    cls = response_class(API_VERSIONS, version)
    keys: tuple[object, ...] = _api_keys(version, ranges)
    error = ErrorCode.none
    if version >= 3 and not valid_client_software(
        request.client_software_name, request.client_software_version
    ):
        error, keys = ErrorCode.invalid_request, ()
    values: dict[str, Any] = {"error_code": error, "api_keys": keys}
    if version >= 1:
        values["throttle_time"] = _ZERO_THROTTLE
    return encode_response(correlation_id, API_VERSIONS, version, cls(**values))


def find_coordinator_frame(
    correlation_id: int,
    version: int,
    request: Any,
    coordinator: Callable[[str], BrokerAddress | None],
) -> bytes:
    """groupcoord's own FindCoordinator answer for GROUP keys, `coordinator(group_id)` for each;
    COORDINATOR_NOT_AVAILABLE (which clients retry) where it is None: no upstream broker known
    yet to put it behind, or (`serve --workers N`) the group's owner not known yet."""
    cls = response_class(FIND_COORDINATOR, version)

    def fields(key: str) -> dict[str, Any]:
        found = coordinator(key)
        return {
            "node_id": found.node_id if found else -1,
            "host": found.host if found else "",
            "port": found.port if found else -1,
            "error_code": ErrorCode.none if found else ErrorCode.coordinator_not_available,
            "error_message": None if found else "the coordinator is not known yet",
        }

    if version == 0:
        entity = cls(**{k: v for k, v in fields(request.key).items() if k != "error_message"})
    elif version < 4:
        entity = cls(throttle_time=_ZERO_THROTTLE, **fields(request.key))
    else:
        entry = _nested(cls, "Coordinator")
        coordinators = tuple(entry(key=k, **fields(k)) for k in request.coordinator_keys)
        entity = cls(throttle_time=_ZERO_THROTTLE, coordinators=coordinators)
    return encode_response(correlation_id, FIND_COORDINATOR, version, entity)

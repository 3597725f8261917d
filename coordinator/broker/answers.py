"""The broker-level APIs a standalone coordinator answers itself: Metadata, FindCoordinator,
ListOffsets, Fetch and (to refuse it) Produce.

groupcoord is the client's only bootstrap in standalone mode, so it must look like a one-broker
cluster: Metadata lists this server as the only broker and the leader of every catalog partition,
FindCoordinator names this server for every group, and consumers' ListOffsets/Fetch find empty
partitions. The group's partitions then act as work units (seed 004's task-distribution use).

Pure: these functions build kio response entities; the server owns timing (Fetch's wait).

Deliberate differences from Kafka, because there is no log behind the partitions:
- Fetch at any offset >= 0 answers NONE with no records and a high watermark equal to the fetch
  offset, so a consumer stays at its committed position instead of being reset by
  OFFSET_OUT_OF_RANGE. Lag reads as 0.
- Produce is refused, partition by partition, with INVALID_REQUEST and a message saying why: there
  is no log to append to. Kafka has no code for "this broker stores no records"; INVALID_REQUEST
  is the one its clients treat as final (Java fails the send, librdkafka the delivery) instead of
  retrying until delivery.timeout.ms. Produce is only advertised so that librdkafka fetches (see
  protocol.apis). A partition the catalog lacks answers UNKNOWN_TOPIC_OR_PARTITION, as Kafka.
- FindCoordinator only knows GROUP keys; TRANSACTION and SHARE keys get INVALID_REQUEST, because
  there is no transaction or share coordinator here.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Container
from dataclasses import dataclass, fields
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from coordinator.core.topics import TopicCatalog, TopicInfo
from protocol.apis import response_class

NODE_ID = 0
CLUSTER_ID = "groupcoord"
_ZERO = datetime.timedelta(0)
_NO_AUTHORIZED_OPERATIONS = -(2**31)
_GROUP_KEY = 0


@dataclass(frozen=True, slots=True)
class Advertised:
    """How clients reach this server: the host and port put in Metadata and FindCoordinator."""

    host: str
    port: int
    node_id: int = NODE_ID


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls))


def _nested(response_cls: type, name: str) -> type:
    """A nested entity class of the same kio version module as the response class."""
    return getattr(sys.modules[response_cls.__module__], name)  # type: ignore[no-any-return]


def make(cls: type, **values: Any) -> Any:
    """Build a kio entity of any version from the fields that version has; the rest are dropped."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in values.items() if k in names})


# --------------------------------------------------------------------------------------------------
# Metadata (3)


def metadata_response(
    version: int, request: Any, catalog: TopicCatalog, advertised: Advertised
) -> Any:
    cls = response_class(3, version)
    broker_cls = _nested(cls, "MetadataResponseBroker")
    topic_cls = _nested(cls, "MetadataResponseTopic")
    partition_cls = _nested(cls, "MetadataResponsePartition")
    node = advertised.node_id

    requested = request.topics
    names: list[str | None]
    by_id: dict[int, Any] = {}  # position -> requested topic id that names no known topic
    if requested is None or (version == 0 and not requested):
        names = [t.name for t in catalog]
    else:
        names = [t.name for t in requested]
        if version >= 10:
            # v10+ may name a topic by id only (KIP-516): a KIP-848 consumer learns its
            # assignment as topic ids and asks for them so (librdkafka). Unknown id:
            # UNKNOWN_TOPIC_ID, as Kafka.
            for i, t in enumerate(requested):
                if t.name is None and t.topic_id is not None:
                    name = catalog.name_of(t.topic_id)
                    names[i] = name
                    if name is None:
                        by_id[i] = t.topic_id

    def partitions(topic: TopicInfo) -> tuple[Any, ...]:
        return tuple(
            make(
                partition_cls,
                error_code=ErrorCode.none,
                partition_index=p,
                leader_id=node,
                leader_epoch=0,
                replica_nodes=(node,),
                isr_nodes=(node,),
                offline_replicas=(),
            )
            for p in range(topic.partitions)
        )

    topics = []
    for i, name in enumerate(names):
        topic = catalog.get(name) if name is not None else None
        if topic is None:
            unknown_id = by_id.get(i)
            topics.append(
                make(
                    topic_cls,
                    error_code=ErrorCode.unknown_topic_or_partition
                    if unknown_id is None
                    else ErrorCode.unknown_topic_id,
                    name=name,
                    topic_id=unknown_id,
                    is_internal=False,
                    partitions=(),
                    topic_authorized_operations=_NO_AUTHORIZED_OPERATIONS,
                )
            )
            continue
        topics.append(
            make(
                topic_cls,
                error_code=ErrorCode.none,
                name=topic.name,
                topic_id=topic.topic_id,
                is_internal=False,
                partitions=partitions(topic),
                topic_authorized_operations=_NO_AUTHORIZED_OPERATIONS,
            )
        )
    return make(
        cls,
        throttle_time=_ZERO,
        brokers=(make(broker_cls, node_id=node, host=advertised.host, port=advertised.port),),
        cluster_id=CLUSTER_ID,
        controller_id=node,
        topics=tuple(topics),
        cluster_authorized_operations=_NO_AUTHORIZED_OPERATIONS,
    )


# --------------------------------------------------------------------------------------------------
# FindCoordinator (10)


# What Kafka 4.4 puts in a successful answer's error_message (Errors.NONE.message()): "NONE" in
# v1-v3, "" in each coordinator of v4+ (checked against Kafka by tests/conformance).
_NO_ERROR_MESSAGE_V1_3 = "NONE"


def find_coordinator_response(version: int, request: Any, advertised: Advertised) -> Any:
    cls = response_class(10, version)
    key_type = getattr(request, "key_type", _GROUP_KEY)
    if version < 4:
        if key_type != _GROUP_KEY:
            return make(
                cls,
                throttle_time=_ZERO,
                error_code=ErrorCode.invalid_request,
                error_message="groupcoord coordinates consumer groups only",
                node_id=-1,
                host="",
                port=-1,
            )
        return make(
            cls,
            throttle_time=_ZERO,
            error_code=ErrorCode.none,
            error_message=_NO_ERROR_MESSAGE_V1_3,
            node_id=advertised.node_id,
            host=advertised.host,
            port=advertised.port,
        )
    coordinator_cls = _nested(cls, "Coordinator")
    ok = key_type == _GROUP_KEY
    coordinators = tuple(
        make(
            coordinator_cls,
            key=key,
            node_id=advertised.node_id if ok else -1,
            host=advertised.host if ok else "",
            port=advertised.port if ok else -1,
            error_code=ErrorCode.none if ok else ErrorCode.invalid_request,
            error_message="" if ok else "groupcoord coordinates consumer groups only",
        )
        for key in request.coordinator_keys
    )
    return make(cls, throttle_time=_ZERO, coordinators=coordinators)


# --------------------------------------------------------------------------------------------------
# ListOffsets (2)


def list_offsets_response(
    version: int, request: Any, catalog: TopicCatalog, stale: Container[str] = ()
) -> Any:
    """Every catalog partition is empty: earliest = latest = 0; a time lookup finds nothing.
    Partitions of a `stale` topic answer NOT_LEADER_OR_FOLLOWER (broker.refresh_signal)."""
    cls = response_class(2, version)
    topic_cls = _nested(cls, "ListOffsetsTopicResponse")
    partition_cls = _nested(cls, "ListOffsetsPartitionResponse")
    topics = []
    for topic in request.topics:
        parts = []
        for p in topic.partitions:
            if not catalog.has_partition(topic.name, p.partition_index):
                error, offset = ErrorCode.unknown_topic_or_partition, -1
            elif topic.name in stale:
                error, offset = ErrorCode.not_leader_or_follower, -1
            elif p.timestamp < 0:  # -1 latest, -2 earliest, -3 max timestamp, -4/-5 tiered
                error, offset = ErrorCode.none, 0
            else:
                error, offset = ErrorCode.none, -1
            parts.append(
                make(
                    partition_cls,
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=-1,
                    offset=offset,
                    leader_epoch=0 if error == ErrorCode.none else -1,
                    old_style_offsets=(offset,) if offset >= 0 else (),
                )
            )
        topics.append(make(topic_cls, name=topic.name, partitions=tuple(parts)))
    return make(cls, throttle_time=_ZERO, topics=tuple(topics))


# --------------------------------------------------------------------------------------------------
# Produce (0)

PRODUCE_REFUSED = (
    "groupcoord in standalone mode stores no records: produce to a Kafka cluster, or run "
    "groupcoord in front of one (--upstream)"
)


def produce_response(version: int, request: Any, catalog: TopicCatalog) -> Any | None:
    """The refusal of every partition of a Produce (module docstring); None for acks=0, which
    Kafka never answers."""
    if request.acks == 0:
        return None
    cls = response_class(0, version)
    topic_cls = _nested(cls, "TopicProduceResponse")
    partition_cls = _nested(cls, "PartitionProduceResponse")
    topics = []
    for topic in request.topic_data:
        parts = []
        for p in topic.partition_data:
            known = catalog.has_partition(topic.name, p.index)
            parts.append(
                make(
                    partition_cls,
                    index=p.index,
                    error_code=ErrorCode.invalid_request
                    if known
                    else ErrorCode.unknown_topic_or_partition,
                    base_offset=-1,
                    log_append_time=None,
                    log_start_offset=-1,
                    record_errors=(),
                    error_message=PRODUCE_REFUSED if known else None,
                )
            )
        topics.append(make(topic_cls, name=topic.name, partition_responses=tuple(parts)))
    return make(cls, throttle_time=_ZERO, responses=tuple(topics))


# --------------------------------------------------------------------------------------------------
# Fetch (1)


def fetch_response(
    version: int, request: Any, catalog: TopicCatalog, stale: Container[str] = ()
) -> tuple[Any, int]:
    """(response, wait_ms): the server sends the response after wait_ms (Fetch's max_wait_ms,
    since no data will ever arrive), or at once when min_bytes <= 0, as Kafka does. Partitions
    of a `stale` topic answer NOT_LEADER_OR_FOLLOWER at once (coordinator.broker.refresh_signal)."""
    cls = response_class(1, version)
    topic_cls = _nested(cls, "FetchableTopicResponse")
    partition_cls = _nested(cls, "PartitionData")
    topics = []
    any_error = False
    for topic in request.topics:
        parts = []
        moved = topic.topic in stale
        for p in topic.partitions:
            if moved and catalog.has_partition(topic.topic, p.partition):
                error, high_watermark = ErrorCode.not_leader_or_follower, -1
                any_error = True
            elif catalog.has_partition(topic.topic, p.partition):
                error = ErrorCode.none
                high_watermark = max(p.fetch_offset, 0)
            else:
                error, high_watermark = ErrorCode.unknown_topic_or_partition, -1
                any_error = True
            parts.append(
                make(
                    partition_cls,
                    partition_index=p.partition,
                    error_code=error,
                    high_watermark=high_watermark,
                    last_stable_offset=high_watermark,
                    log_start_offset=0 if error == ErrorCode.none else -1,
                    aborted_transactions=(),
                    preferred_read_replica=-1,
                    records=b"",
                )
            )
        topics.append(make(topic_cls, topic=topic.topic, partitions=tuple(parts)))
    response = make(
        cls, throttle_time=_ZERO, error_code=ErrorCode.none, session_id=0, responses=tuple(topics)
    )
    # Kafka answers at once when a partition has an error, so the client re-reads metadata.
    waits = request.min_bytes > 0 and not any_error
    wait_ms = int(request.max_wait.total_seconds() * 1000) if waits else 0
    return response, max(0, min(wait_ms, 60_000))

"""What a sidecar answers a client itself when the upstream broker it needs cannot be reached.

A Kafka broker that cannot reach the rest of its cluster keeps its clients' connections open and
answers in Kafka's own terms: Metadata names the partitions whose leader is gone with
LEADER_NOT_AVAILABLE (leader -1), and a Produce or Fetch for such a partition gets
NOT_LEADER_OR_FOLLOWER. Both are retriable: clients back off, re-read their metadata and try
again, as during a leader election, and carry on without a restart once the leader is back. A
sidecar whose upstream is down does the same (coordinator.sidecar.connection calls these when
connecting upstream fails), instead of closing the connection, which clients report as an error
on every retry (aiokafka: an ERROR line every 5 s).

What is answered, from what the sidecar last knew (coordinator.sidecar.cluster_view):
- ApiVersions: the last ranges learnt from any upstream broker, or before any was ever reached
  `FALLBACK_UPSTREAM_RANGES`, intersected with groupcoord's as usual (rewrite.api_version_ranges).
- Metadata: the last known topics; the brokers last seen, on their sidecar ports; a partition
  whose last leader cannot be reached has LEADER_NOT_AVAILABLE and leader -1, as in Kafka's
  metadata cache (KRaftMetadataCache: leader not alive -> LEADER_NOT_AVAILABLE, NO_LEADER_ID;
  from Kafka's source, not compared on a live broker), its topic error NONE. Kafka still lists
  the replicas, the ISR and the leader epoch there; the view keeps none of them, so they are
  empty and -1 (clients read only the leader of a leaderless partition). A requested topic
  the sidecar does not know gets LEADER_NOT_AVAILABLE at topic level with no partitions (what
  Kafka answers while it auto-creates one). We differ on purpose: Kafka would know whether the
  topic exists; the sidecar cannot tell while the upstream is down, and
  UNKNOWN_TOPIC_OR_PARTITION would tell a producer the topic is not there.
  Before the sidecar ever reached its upstream it knows no broker and lists none, where a Kafka
  broker always lists itself: also on purpose. Listed under a made-up node id, the sidecar is a
  broker the clients drop when the upstream's real ones appear, and librdkafka lost the
  Metadata request its consumer was joining with on it (the group then waits for the periodic
  refresh, minutes). Listing none, clients keep their bootstrap connection (aiokafka warns
  that no broker is named); librdkafka can still lose that request when it retires its
  bootstrap broker, less often.
- Produce (acks != 0), Fetch, ListOffsets: NOT_LEADER_OR_FOLLOWER for every partition (Kafka's
  ReplicaManager answers it on a broker that does not lead the partition; clients re-read
  metadata on it). An incremental Fetch (KIP-227: it may name no partition) gets
  FETCH_SESSION_ID_NOT_FOUND, as from a broker that lost its sessions, so the client's next Fetch
  is a full one. These are decoded with groupcoord's codec (protocol.apis) only on this path: a
  healthy upstream's requests are never parsed beyond their header.
- Anything else: None, and the caller closes the connection, as before.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import Any, Final

from kio.schema.errors import ErrorCode

from coordinator.broker.answers import make
from coordinator.core.topics import TopicInfo
from coordinator.sidecar import rewrite
from coordinator.sidecar.rewrite import BrokerAddress, Ranges
from protocol import apis, codec

_ZERO: Final = timedelta(0)
_NO_LEADER: Final = -1  # Kafka's MetadataResponse.NO_LEADER_ID
_NO_CONTROLLER: Final = -1

# What every Apache Kafka broker from 2.1 through 4.x offers of the data and topic APIs: 2.1's
# newest versions, 4.0's floors (KIP-896 removed the older ones). ApiVersions answers it before
# the sidecar ever reached its upstream, so that the client proceeds (the group APIs are
# groupcoord's own); the connection keeps these versions when the upstream comes up.
FALLBACK_UPSTREAM_RANGES: Final[Mapping[int, tuple[int, int]]] = {
    0: (3, 7),  # Produce
    1: (4, 10),  # Fetch
    2: (1, 4),  # ListOffsets
    3: (0, 7),  # Metadata
    10: (1, 2),  # FindCoordinator (groups: answered here; transactions: the upstream's)
    19: (2, 3),  # CreateTopics
    20: (1, 3),  # DeleteTopics
    22: (0, 1),  # InitProducerId
    37: (0, 1),  # CreatePartitions
}


def api_ranges(learnt: Iterable[Ranges], answered_here: Iterable[int]) -> Ranges:
    """ApiVersions' ranges while the upstream is down: the first ranges learnt from any upstream
    broker, else the fallback table's."""
    for ranges in learnt:
        return ranges
    return rewrite.api_version_ranges(FALLBACK_UPSTREAM_RANGES, answered_here)


def answer(
    frame: bytes,
    topics: Mapping[str, TopicInfo],
    leaders: Mapping[tuple[str, int], int],
    brokers: list[BrokerAddress],
    reachable: Callable[[int], bool],
) -> bytes | None:
    """The framed answer to a forwarded request whose upstream broker cannot be reached; b"" for
    an acks=0 Produce (never answered); None where there is no such answer (close instead).
    `brokers`: the brokers as clients know them (sidecar ports); `reachable(node_id)`: whether
    the sidecar can reach that upstream broker now."""
    api_key = rewrite.REQUEST_START.unpack_from(frame)[1]
    if api_key not in (rewrite.PRODUCE, rewrite.FETCH, rewrite.LIST_OFFSETS, rewrite.METADATA):
        return None
    try:
        header, request = codec.decode_request(frame[4:])
    except codec.CodecError:
        return None
    response: Any
    version = header.api_version
    if api_key == rewrite.METADATA:
        response = _metadata(version, request, topics, leaders, brokers, reachable)
    elif api_key == rewrite.PRODUCE:
        if request.acks == 0:  # type: ignore[attr-defined]
            return b""
        response = _produce(version, request)
    elif api_key == rewrite.FETCH:
        response = _fetch(version, request)
    else:
        response = _list_offsets(version, request)
    return codec.encode_response(header, response)


def _nested(api_key: int, version: int, name: str) -> tuple[type, type]:
    cls = apis.response_class(api_key, version)
    module = __import__(cls.__module__, fromlist=[name])
    return cls, getattr(module, name)


def _metadata(
    version: int,
    request: Any,
    topics: Mapping[str, TopicInfo],
    leaders: Mapping[tuple[str, int], int],
    brokers: list[BrokerAddress],
    reachable: Callable[[int], bool],
) -> Any:
    cls, broker_cls = _nested(rewrite.METADATA, version, "MetadataResponseBroker")
    _, topic_cls = _nested(rewrite.METADATA, version, "MetadataResponseTopic")
    _, partition_cls = _nested(rewrite.METADATA, version, "MetadataResponsePartition")
    names: list[str | None]
    if request.topics is None or (version == 0 and not request.topics):
        names = [*sorted(topics)]
    else:
        by_id = {t.topic_id: t.name for t in topics.values()}
        names = [t.name if t.name is not None else by_id.get(t.topic_id) for t in request.topics]
    listed = {b.node_id for b in brokers}

    def partition(name: str, index: int) -> Any:
        leader = leaders.get((name, index), _NO_LEADER)
        up = leader in listed and reachable(leader)
        return make(
            partition_cls,
            error_code=ErrorCode.none if up else ErrorCode.leader_not_available,
            partition_index=index,
            leader_id=leader if up else _NO_LEADER,
            leader_epoch=-1,
            replica_nodes=(leader,) if up else (),
            isr_nodes=(leader,) if up else (),
            offline_replicas=(),
        )

    out = []
    for name in names:
        info = topics.get(name) if name is not None else None
        out.append(
            make(
                topic_cls,
                error_code=ErrorCode.none if info else ErrorCode.leader_not_available,
                name=name,
                topic_id=info.topic_id if info else None,
                is_internal=False,
                partitions=tuple(partition(info.name, p) for p in range(info.partitions))
                if info
                else (),
                topic_authorized_operations=-(2**31),
            )
        )
    return make(
        cls,
        throttle_time=_ZERO,
        brokers=tuple(
            make(broker_cls, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
            for b in brokers
        ),
        cluster_id=None,
        controller_id=_NO_CONTROLLER,
        topics=tuple(out),
        cluster_authorized_operations=-(2**31),
    )


def _produce(version: int, request: Any) -> Any:
    cls, topic_cls = _nested(rewrite.PRODUCE, version, "TopicProduceResponse")
    _, partition_cls = _nested(rewrite.PRODUCE, version, "PartitionProduceResponse")
    topics = [
        make(
            topic_cls,
            name=topic.name,
            partition_responses=tuple(
                make(
                    partition_cls,
                    index=p.index,
                    error_code=ErrorCode.not_leader_or_follower,
                    base_offset=-1,
                    log_append_time=None,
                    log_start_offset=-1,
                    record_errors=(),
                    error_message=None,
                )
                for p in topic.partition_data
            ),
        )
        for topic in request.topic_data
    ]
    return make(cls, throttle_time=_ZERO, responses=tuple(topics))


def _fetch(version: int, request: Any) -> Any:
    cls, topic_cls = _nested(rewrite.FETCH, version, "FetchableTopicResponse")
    _, partition_cls = _nested(rewrite.FETCH, version, "PartitionData")
    if (
        int(getattr(request, "session_id", 0)) != 0
        and int(getattr(request, "session_epoch", -1)) > 0
    ):
        return make(
            cls,
            throttle_time=_ZERO,
            error_code=ErrorCode.fetch_session_id_not_found,
            session_id=0,
            responses=(),
        )
    topics = [
        make(
            topic_cls,
            topic=topic.topic,
            topic_id=getattr(topic, "topic_id", None),
            partitions=tuple(
                make(
                    partition_cls,
                    partition_index=p.partition,
                    error_code=ErrorCode.not_leader_or_follower,
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=(),
                    preferred_read_replica=-1,
                    records=b"",
                )
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    ]
    return make(
        cls, throttle_time=_ZERO, error_code=ErrorCode.none, session_id=0, responses=tuple(topics)
    )


def _list_offsets(version: int, request: Any) -> Any:
    cls, topic_cls = _nested(rewrite.LIST_OFFSETS, version, "ListOffsetsTopicResponse")
    _, partition_cls = _nested(rewrite.LIST_OFFSETS, version, "ListOffsetsPartitionResponse")
    topics = [
        make(
            topic_cls,
            name=topic.name,
            partitions=tuple(
                make(
                    partition_cls,
                    partition_index=p.partition_index,
                    error_code=ErrorCode.not_leader_or_follower,
                    timestamp=-1,
                    offset=-1,
                    leader_epoch=-1,
                    old_style_offsets=(),
                )
                for p in topic.partitions
            ),
        )
        for topic in request.topics
    ]
    return make(cls, throttle_time=_ZERO, topics=tuple(topics))

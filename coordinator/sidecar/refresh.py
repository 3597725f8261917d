"""The topic-change refresh signal (coordinator.broker.refresh_signal) in sidecar mode.

A rebalance forced by a changed topic only helps if the group's leader assigns from fresh
metadata, and classic-group leaders assign from their metadata cache (refreshed every
`metadata.max.age.ms`). In standalone mode groupcoord answers the changed topic's partitions in
Fetch/ListOffsets with NOT_LEADER_OR_FOLLOWER until the client re-reads its metadata; every client
re-reads metadata on that error. In sidecar mode Fetch and ListOffsets go upstream, and the
upstream sends no such signal, so the sidecar gives it: while the signal is armed (for a while
after a topic change; `Server.topic_service`), a Fetch or ListOffsets that includes a topic the
client has not re-read since the change is answered here instead of forwarded, by the standalone
broker view (broker.answers): NOT_LEADER_OR_FOLLOWER for that topic's partitions, an empty
answer for the others (the client fetches them again at once). An incremental fetch-session
request (KIP-227: it may leave partitions out) whose session may hold a stale topic is answered
FETCH_SESSION_ID_NOT_FOUND instead, so the client's next Fetch is a full one, which then gets the
signal.

A topic the sidecar saw deleted upstream is answered the same way for every client, for a while
(broker.refresh_signal's "gone" topics): its partitions get UNKNOWN_TOPIC_OR_PARTITION, as
from Kafka, whatever the upstream would answer (straight against tansu, a librdkafka consumer
crashed on what came back), and the client re-reads its metadata, which no longer lists it.

Only while the signal is armed are Metadata, Fetch and ListOffsets requests decoded; otherwise
this costs one truth test per request. The sidecar offers Fetch and ListOffsets only at versions
groupcoord's codec decodes (protocol.apis), so every such request can be read here.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from kio.schema.errors import ErrorCode

from coordinator.broker import answers as broker
from protocol import apis, codec

if TYPE_CHECKING:
    from coordinator.serve.server import Connection, Server

_FETCH = 1
_LIST_OFFSETS = 2


def armed(server: Server) -> bool:
    return bool(server.topic_service.signal)


def metadata_read(server: Server, conn: object, frame: bytes) -> None:
    """A Metadata request passes through: its client is about to see the topics it asks for."""
    try:
        header, request = codec.decode_request(frame[4:])
    except codec.CodecError:
        return
    server.topic_service.metadata_read(cast("Connection", conn), header, request)


def local_answer(server: Server, conn: Any, frame: bytes) -> bytes | None:
    """The framed answer to a Fetch/ListOffsets that must tell its client "your metadata of a
    changed topic is stale", or None: forward it. `conn.session_topics` remembers the topics of
    the connection's last full Fetch (None: not known), so that only a fetch session that may
    hold a stale topic is reset."""
    request: Any
    try:
        header, request = codec.decode_request(frame[4:])
    except codec.CodecError:
        return None
    service = server.topic_service
    stale = service.stale(cast("Connection", conn), header)
    if header.api_key == _FETCH:
        if _incremental(request):
            known: frozenset[str] | None = conn.session_topics
            if not stale or (known is not None and not known & stale):
                return None
            conn.session_topics = None
            service.answered(conn, header, stale, stale if known is None else known)
            response: Any = broker.make(
                apis.response_class(_FETCH, header.api_version),
                throttle_time=timedelta(0),
                error_code=ErrorCode.fetch_session_id_not_found,
                session_id=0,
                responses=(),
            )
            return codec.encode_response(header, response)
        conn.session_topics = frozenset(t.topic for t in request.topics)
        if not service.answered(conn, header, stale, conn.session_topics):
            return None
        response, _ = broker.fetch_response(header.api_version, request, server.catalog, stale)
        return codec.encode_response(header, response)
    if header.api_key == _LIST_OFFSETS and service.answered(
        conn, header, stale, (t.name for t in request.topics)
    ):
        response = broker.list_offsets_response(header.api_version, request, server.catalog, stale)
        return codec.encode_response(header, response)
    return None


def _incremental(request: Any) -> bool:
    """A KIP-227 incremental fetch (an existing session, epoch > 0): it may omit partitions."""
    return (
        int(getattr(request, "session_id", 0)) != 0
        and int(getattr(request, "session_epoch", -1)) > 0
    )

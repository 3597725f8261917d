"""Sidecar mode: groupcoord in front of a Kafka-compatible cluster, owning its group coordination.

`groupcoord serve --upstream b1:9092,b2:9092`: clients bootstrap at groupcoord. Produce, Fetch and
every other API go to the upstream brokers through groupcoord; the group APIs, FindCoordinator for
groups and ApiVersions are answered by groupcoord itself.

Listeners: the server's own port is the bootstrap (its requests go to any upstream broker), and
each upstream broker gets a local port of its own (`--broker-port-base` + node id, or an ephemeral
port), opened when a Metadata answer first names the broker. Metadata, DescribeCluster and
transaction FindCoordinator answers are rewritten to name those ports (sidecar.rewrite); group
FindCoordinator names the listener of the lowest-numbered broker, where group requests are answered
locally like everywhere else.

Invariants:
- Per client connection, responses leave in request order, whether they were answered locally or
  upstream (`Slot` queue). Forwarded requests are pipelined: each is written upstream as soon as
  it is read, on the upstream link the client connection holds, so a producer's in-flight requests
  stay in flight.
- Only request headers are parsed, plus Produce's acks (acks=0 has no response); only the responses
  that carry broker addresses are decoded and re-encoded.
- An upstream failure closes the client connections that had requests on it (a broker failure, as a
  client sees one) and nothing else: group APIs keep being answered.
- In a fleet (`Sidecar.locator` set), group requests go through coordinator.sidecar.forward:
  answered here, forwarded to the member that owns the group, or refused with a retriable error.
  Without a locator they are answered here, by the same path as before fleets existed.
- A secured listener (`--security-protocol`, `--authorizer`; docs/security.md) is the
  server's gate (coordinator.serve.secure) on every client connection: nothing is forwarded
  before SASL authentication, SASL and the ACL/credential APIs are answered here
  (`Sidecar.answered_here`), and what groupcoord answers is judged by the ACLs, in a fleet by
  the member the client is connected to (coordinator.sidecar.forward). Forwarded requests go
  on the sidecar's own upstream identity. The listeners are TLS with the server's context.
- Topic metadata (partition counts, ids, racks) flows into `Server.topic_changed` from every
  Metadata answer that passes through and from a refresh every `metadata_refresh_ms`, so partitions
  added upstream rebalance the groups that read the topic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final, cast

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from coordinator.broker.security_admin import SECURITY_ADMIN_APIS
from coordinator.core.topics import TopicInfo
from coordinator.security.acl import ANONYMOUS
from coordinator.security.client import PLAINTEXT, ClientSecurity
from coordinator.serve import trace
from coordinator.serve.addresses import parse_upstream
from coordinator.serve.listener import Listening, start_listener
from coordinator.serve.secure import tls_principal
from coordinator.serve.server import CLOSE_TIMEOUT_S, Connection, Server
from coordinator.sidecar import refresh as sidecar_signal
from coordinator.sidecar import rewrite
from coordinator.sidecar.cluster_view import ClusterView
from coordinator.sidecar.forward import PeerLinks, Router
from coordinator.sidecar.placement import Locator
from coordinator.sidecar.rewrite import (
    API_VERSIONS,
    DELETE_TOPICS,
    DESCRIBE_CLUSTER,
    FIND_COORDINATOR,
    METADATA,
    PRODUCE,
    REQUEST_START,
    TOPIC_ADMIN,
    WITHHELD,
    BrokerAddress,
    FrameStream,
    Ranges,
    RewriteError,
    Sink,
)
from coordinator.sidecar.slots import STREAMING, LocalReply, Rewritten, Slot
from coordinator.sidecar.topic_lookup import HeldRequests, TopicLookup, metadata_request
from coordinator.sidecar.traffic import UpstreamCollector
from coordinator.sidecar.txn import OBSERVED as TXN_OBSERVED
from coordinator.sidecar.txn import TXN_OFFSET_COMMIT, TxnOffsets
from coordinator.sidecar.txn_notice import WRITE_TXN_MARKERS
from coordinator.sidecar.upstream import Link, Upstreams, UpstreamUnavailable
from coordinator.sidecar.upstream_clients import (
    security_from_settings,
)
from protocol import apis, codec
from protocol.framing import FramingError

if TYPE_CHECKING:
    from coordinator.serve.http import Observability

log = logging.getLogger("groupcoord.sidecar")

MAX_PENDING_REQUESTS: Final = 512  # per client connection; reading pauses beyond it
REQUEST_PEEK_BYTES: Final = 512  # read of a large request before streaming it (header, acks)
_SIGNALLED: Final = frozenset({rewrite.FETCH, rewrite.LIST_OFFSETS})
_SASL: Final = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate
# Requests answered here, or whose answers are rewritten: always handled as whole frames.
_WHOLE: Final = (
    apis.GROUP_APIS
    | apis.CONSUMER_GROUP_APIS
    | WITHHELD
    | TOPIC_ADMIN
    | SECURITY_ADMIN_APIS  # answered here on a secured listener
    | {API_VERSIONS, FIND_COORDINATOR, METADATA, DESCRIBE_CLUSTER, 17, 36}  # 17, 36: SASL
    | {TXN_OFFSET_COMMIT}
    | TXN_OBSERVED  # coordinator.sidecar.txn
    | {WRITE_TXN_MARKERS}  # from a fleet member: an outcome notice (coordinator.sidecar.txn)
)
_GROUP_KEY: Final = 0
_TXN: Final = TXN_OBSERVED | {TXN_OFFSET_COMMIT}
# What a sidecar answers itself (groupcoord_requests_total); the rest is forwarded upstream.
_ANSWERED_HERE: Final = (
    apis.GROUP_APIS | apis.CONSUMER_GROUP_APIS | {API_VERSIONS, FIND_COORDINATOR}
)
# Group requests: answered by the core here, or routed to the fleet member that owns the group.
# KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe too (issue 23): their records travel
# in the state topic with the classic groups' (coordinator.sidecar.fleet_journal).
_GROUP_ROUTED: Final = apis.GROUP_APIS | apis.CONSUMER_GROUP_APIS
_PAUSED_UPSTREAM: Final = 1  # reasons a client connection's reading is paused (bit mask)
_PAUSED_PENDING: Final = 2
_REFRESH_REQUEST = MetadataRequest(
    topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
)


@dataclass(slots=True)
class SidecarOptions:
    upstream: list[tuple[str, int]]
    broker_port_base: int = 0  # 0: an ephemeral port per broker
    metadata_refresh_ms: int = 2_000
    topic_delete_after_ms: int = 60_000
    lag_interval_ms: int = 10_000
    metrics_per_group: bool = False
    security: ClientSecurity = PLAINTEXT  # TLS/SASL toward the upstream (upstream_clients)


def from_settings(server: Server, settings: Any) -> Sidecar | None:
    """The sidecar for `serve`'s settings (coordinator.serve.config), or None in standalone mode."""
    if not settings.upstream:
        return None
    options = SidecarOptions(
        upstream=parse_upstream(settings.upstream),
        broker_port_base=settings.broker_port_base,
        metadata_refresh_ms=settings.upstream_refresh_ms,
        topic_delete_after_ms=settings.upstream_topic_delete_after_ms,
        lag_interval_ms=settings.lag_interval_ms,
        metrics_per_group=settings.metrics_per_group,
        security=security_from_settings(settings),
    )
    return Sidecar(server, options)


class Sidecar:
    def __init__(self, server: Server, options: SidecarOptions) -> None:
        self.server = server
        self.options = options
        self.upstreams = Upstreams(options.upstream, options.security)
        self.local_ports: dict[int, int] = {}
        # Topics, leaders, and whether the upstream answers (coordinator.sidecar.cluster_view).
        self.view = ClusterView(server, options.topic_delete_after_ms, self.refresh_soon)
        # A commit naming a topic not seen yet asks the upstream first (sidecar.topic_lookup).
        self.topic_lookup = TopicLookup(
            server.catalog, self._ask_topics, partial(self.observe_metadata, full=False)
        )
        self._servers: list[Listening] = []
        self._tasks: set[asyncio.Task[Any]] = set()
        self._refresh_now = asyncio.Event()
        self._ranges: dict[int, Ranges] = {}  # by id(Broker)
        self.lag: Any = None  # coordinator.sidecar.lag.LagTracker when metrics_per_group
        # A fleet (coordinator.sidecar.forward): where each group is answered, and the links to
        # the other members. None: a single sidecar answers every group itself.
        self.locator: Locator | None = None
        self.peer_links = PeerLinks(self.spawn)
        self.txn = TxnOffsets(self)  # TxnOffsetCommit and the transactions it follows (issue 29)
        # A secured listener (docs/security.md): the gate authenticates and judges clients here,
        # and SASL and the ACL/credential admin APIs are answered here instead of upstream.
        gate = server.gate
        self.answered_here: frozenset[int] = frozenset()
        if gate is not None:
            sasl = {17, 36} if gate.options.sasl else set()
            self.answered_here = frozenset(sasl | SECURITY_ADMIN_APIS)
        server.protocol_factory = lambda: SidecarConnection(self, None)
        server.ready_check = self.readiness  # a fleet (coordinator.sidecar.fleet) wraps it
        server.upstream_status = self.upstream_status

    # -- life cycle ------------------------------------------------------------------------------

    async def start(self, obs: Observability | None = None) -> None:
        """After `server.start()`: learn the cluster (not fatal if it is down), start the periodic
        refresh and, with per-group metrics, the lag measurement, shown through `obs` (the
        metrics registry and the status page) when given."""
        log.info(
            "sidecar mode: upstream %s",
            ",".join(f"{b.host}:{b.port}" for b in self.upstreams.bootstrap),
        )
        # The topics the log restored: a topic deleted upstream meanwhile is noticed as gone.
        self.view.restore(self.server.catalog)
        try:
            await self.refresh()
        except (UpstreamUnavailable, RewriteError) as exc:
            self._refresh_failed(exc)
            log.warning("upstream cluster not reachable yet (%s); will keep trying", exc)
        self.spawn(self._refresh_loop())
        self.txn.start(obs)
        if self.options.metrics_per_group:
            from coordinator.sidecar.lag import LagCollector, LagTracker

            self.lag = LagTracker(
                self.server.core,
                self.leaders,
                self.upstreams.brokers,
                self.options.lag_interval_ms,
                stale=self.refresh_soon,
            )
            self.spawn(self.lag.run())
            if obs is not None:
                obs.status.add_fields(self.lag.status)
                if obs.metrics is not None:
                    obs.metrics.registry.register(LagCollector(self.lag))
        if obs is not None:  # the status page's end offsets: the lag tracker's, else unknown
            obs.status.end_offsets = None if self.lag is None else self.lag.measured_end_offsets
        if obs is not None and obs.metrics is not None:
            # Forwarded APIs are counted as groupcoord_upstream_*, not as answered here.
            obs.metrics.stats.not_answered_here(apis.APIS.keys() - _ANSWERED_HERE)
            obs.metrics.registry.register(UpstreamCollector(self))

    async def stop(self) -> None:
        """After `server.stop()`: close the broker listeners, what they still serve, and the
        upstream links."""
        for task in list(self._tasks):
            task.cancel()
        for server in self._servers:
            server.close()
        for conn in list(self.server.connections):
            if isinstance(conn, SidecarConnection):
                conn.close()
        self.upstreams.close()
        self.peer_links.close()
        for server in self._servers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), CLOSE_TIMEOUT_S)
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # -- the cluster view ------------------------------------------------------------------------

    async def _refresh_loop(self) -> None:
        interval_s = self.options.metadata_refresh_ms / 1000
        while True:
            # asyncio.timeout, not wait_for: 3.11's wait_for can drop the cancellation that
            # stops this loop when it races the event.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval_s):
                    await self._refresh_now.wait()
            self._refresh_now.clear()
            try:
                await self.refresh()
            except (UpstreamUnavailable, RewriteError) as exc:
                self._refresh_failed(exc)
                log.debug("metadata refresh failed: %s", exc)

    def refresh_soon(self) -> None:
        self._refresh_now.set()

    async def refresh(self) -> None:
        """Read the whole cluster's metadata from any upstream broker."""
        _, frame = await self.upstreams.request_any(_REFRESH_REQUEST)
        self.observe_metadata(rewrite.decode_response(METADATA, 12, frame), full=True)
        self.view.refreshed()

    def _refresh_failed(self, exc: Exception) -> None:
        self.view.refresh_failed(exc)

    def readiness(self) -> tuple[bool, str]:
        return self.view.readiness()

    def upstream_status(self) -> dict[str, Any]:
        """The upstream as the status page and /upstream show it."""
        return {
            "bootstrap": ",".join(f"{b.host}:{b.port}" for b in self.upstreams.bootstrap),
            "brokers": len(self.upstreams.brokers),
            **self.view.status(),
            "topic_lookups": self.topic_lookup.requests,  # commits naming unseen topics
        }

    def observe_metadata(self, response: Any, full: bool) -> None:
        """Learn brokers and topics from a Metadata answer (the topics: ClusterView.observe)."""
        for node_id in self.upstreams.update(rewrite.metadata_brokers(response)):
            self.local_address(node_id)  # listen before any client is told about the broker
        self.view.observe(response, full)

    async def _ask_topics(self, names: list[str]) -> bytes:
        return (await self.upstreams.request_any(metadata_request(names)))[1]

    def topics_deleted(self, names: Iterable[str]) -> None:
        self.view.topics_deleted(names)

    @property
    def topics(self) -> dict[str, TopicInfo]:
        return self.view.topics

    @property
    def leaders(self) -> dict[tuple[str, int], int]:
        return self.view.leaders

    @property
    def upstream_answered(self) -> bool | None:
        return self.view.answered

    # -- listeners -------------------------------------------------------------------------------

    def local_address(self, node_id: int) -> tuple[str, int] | None:
        """Where clients reach upstream broker `node_id` through us; opens the listener."""
        port = self.local_ports.get(node_id)
        if port is None:
            port = self._listen(node_id)
            if port is None:
                return None
        return self.server.advertised.host, port

    def _listen(self, node_id: int) -> int | None:
        base = self.options.broker_port_base
        port = base + node_id if base else 0
        host = self.server.options.host
        try:
            if not 0 <= port <= 65535:
                raise OSError(f"port {port} out of range")
            # Bound now, so the port can be put in the answer being rewritten; the loop starts
            # accepting on it right after (a connection meanwhile waits in the backlog).
            sock = socket.create_server((host, port), backlog=1024)
        except OSError as exc:
            log.error("cannot listen for upstream broker %d on %s:%d: %s", node_id, host, port, exc)
            return None
        sock.setblocking(False)
        bound: int = sock.getsockname()[1]
        self.local_ports[node_id] = bound
        log.info("listening on %s:%d for upstream broker %d", host, bound, node_id)

        def factory() -> SidecarConnection:
            return SidecarConnection(self, node_id)

        async def serve() -> None:
            context = self.server.options.security.ssl_context
            server: Listening
            if context is None:
                server = await start_listener(factory, None, 0, sock=sock)
            else:  # TLS: the loop's own transports, as the bootstrap listener (Server.start)
                loop = asyncio.get_running_loop()
                server = await loop.create_server(factory, sock=sock, ssl=context, backlog=1024)
            self._servers.append(server)

        self.spawn(serve())
        return bound

    def coordinator(self) -> BrokerAddress | None:
        """What FindCoordinator names for every group: the lowest-numbered broker's listener."""
        for node_id in sorted(self.upstreams.brokers):
            address = self.local_address(node_id)
            if address is not None:
                return BrokerAddress(node_id, address[0], address[1])
        return None

    # -- ApiVersions -----------------------------------------------------------------------------

    def cached_ranges(self, node_id: int | None) -> Ranges | None:
        broker = self.upstreams.brokers.get(node_id) if node_id is not None else None
        for candidate in [broker] if broker else self.upstreams.candidates():
            ranges = self._ranges.get(id(candidate))
            if ranges is not None:
                return ranges
        return None

    async def api_ranges(self, node_id: int | None) -> Ranges:
        """What ApiVersions advertises on a listener: the upstream broker's ranges, intersected
        with groupcoord's (sidecar.rewrite.api_version_ranges). Raises UpstreamUnavailable."""
        broker = self.upstreams.brokers.get(node_id) if node_id is not None else None
        errors = []
        for candidate in [broker] if broker else self.upstreams.candidates():
            ranges = self._ranges.get(id(candidate))
            if ranges is not None:
                return ranges
            try:
                frame = await candidate.request(ApiVersionsRequest())
                upstream = rewrite.parse_api_versions(frame, 0)
            except (UpstreamUnavailable, RewriteError) as exc:
                errors.append(str(exc))
                continue
            candidate.api_versions = upstream
            ranges = rewrite.api_version_ranges(upstream, self.answered_here)
            self._ranges[id(candidate)] = ranges
            return ranges
        raise UpstreamUnavailable("; ".join(errors) or f"no upstream broker {node_id}")

    # -- rewriting -------------------------------------------------------------------------------

    def metadata_answer(self, version: int, frame: bytes) -> bytes:
        data, response = rewrite.rewrite_metadata(version, frame, self.local_address)
        self.observe_metadata(response, full=False)
        return data


class SidecarConnection(asyncio.Protocol):
    """A client connection on a sidecar listener; `node_id` None is the bootstrap listener.
    `peer`: a connection on the fleet listener, from another member forwarding group requests
    (coordinator.sidecar.forward), which are then never forwarded again. `admit`: with a secured
    listener, whether that connection is a member's (coordinator.sidecar.fleet_tls); one it
    refuses is closed before anything it sent is read."""

    def __init__(
        self,
        sidecar: Sidecar,
        node_id: int | None,
        peer: bool = False,
        admit: Callable[[asyncio.BaseTransport], bool] | None = None,
    ) -> None:
        self._sidecar = sidecar
        self._node_id = node_id
        self.from_peer = peer  # (`self.peer` is the remote address, for logs)
        self._admit = admit
        self._router: Router | None = None  # made at the first group request in a fleet
        self._stream = FrameStream(
            self._handle,
            self._on_start,
            sidecar.server.options.max_frame_bytes,
            rewrite.MIN_REQUEST_BYTES,
            REQUEST_PEEK_BYTES,
        )
        self._slots: deque[Slot] = deque()
        self._held = HeldRequests(
            sidecar.topic_lookup, sidecar.server.options.max_frame_bytes, lambda: self._closed
        )
        self._link: Link | None = None
        self._queued: list[tuple[bytes, int, Slot | None]] | None = None
        self._transport: asyncio.Transport | None = None
        self._closed = False
        self._paused = 0
        self.client_host = "/unknown"
        self.peer = "?"
        self.fetch_timer: asyncio.TimerHandle | None = None
        self._upstream_sasl = False  # SASL went upstream through it: never pool its link
        # The gate's (coordinator.serve.secure) on a secured listener: who the client is.
        self.principal = ANONYMOUS
        self.authenticated = False
        self.sasl_exchange: Any = None
        self.session_expires: float | None = None
        # The topics of this connection's last full Fetch, while the refresh signal is armed.
        self.session_topics: frozenset[str] | None = None

    @property
    def closed(self) -> bool:
        return self._closed

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        if self._admit is not None and not self._admit(transport):
            self._close_now()  # not a fleet member: its requests would skip the ACLs
            return
        peername = transport.get_extra_info("peername")
        if peername:
            self.client_host = "/" + str(peername[0])
            self.peer = f"{peername[0]}:{peername[1]}"
        principal = tls_principal(transport)  # a client certificate (mTLS)
        if principal is not None:
            self.principal = principal
        # Server.stop() closes these along with its own connections; metrics count them.
        self._sidecar.server.connections.add(cast(Connection, self))
        self._sidecar.server.connections_accepted += 1

    def data_received(self, data: bytes) -> None:
        if self._closed:
            return
        try:
            self._stream.feed(data)
        except FramingError as exc:
            self.abort(f"bad framing: {exc}")
            return
        if len(self._slots) > MAX_PENDING_REQUESTS:
            self._pause(_PAUSED_PENDING)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._sidecar.server.connections.discard(cast(Connection, self))
        self._slots.clear()
        if self._router is not None:
            self._router.close()
        link, self._link = self._link, None
        if link is not None and self._upstream_sasl:
            link.close()
        elif link is not None:
            link.broker.release(link)  # closed instead if it still has requests in flight

    def pause_writing(self) -> None:  # the client reads slower than the upstream answers
        if self._link is not None and self._link.transport is not None:
            self._link.transport.pause_reading()

    def resume_writing(self) -> None:
        if self._link is not None and self._link.transport is not None:
            self._link.transport.resume_reading()

    # -- routing ---------------------------------------------------------------------------------

    def _on_start(self, data: bytes, pos: int, total: int) -> Sink | None:
        """A large request (a Produce, typically) is arriving: once connected upstream, forward
        its bytes as they come instead of holding the whole frame first."""
        link = self._link
        if link is None or self._closed:
            return None
        _, api_key, version, correlation_id = REQUEST_START.unpack_from(data, pos)
        if api_key in _WHOLE or (
            api_key in _SIGNALLED and sidecar_signal.armed(self._sidecar.server)
        ):
            return None
        acks = -1
        if api_key == PRODUCE:
            try:
                acks = rewrite.produce_acks(data[pos : pos + REQUEST_PEEK_BYTES], version)
            except Exception:  # its header is longer than the peek: take it whole
                return None
        slot = Slot(self)
        self._slots.append(slot)
        if acks == 0:  # no response will come (see _handle)
            link.expect(correlation_id, None, api_key, total)
            self.complete(slot, b"")
        else:
            link.expect(correlation_id, slot, api_key, total)
        return link

    def _handle(self, frame: bytes) -> None:
        if self._closed:
            return
        _, api_key, version, correlation_id = REQUEST_START.unpack_from(frame)
        gate = self._sidecar.server.gate
        if gate is not None and not self.from_peer and not gate.admit(self, api_key):
            return  # SASL: not authenticated (or its session ran out); the connection closed
        if api_key in _GROUP_ROUTED:
            slot = Slot(self)
            self._slots.append(slot)
            self._held.run(api_key, frame, partial(self._group, slot, frame))
        elif api_key == API_VERSIONS:
            self._api_versions(frame)
        elif api_key == FIND_COORDINATOR:
            self._find_coordinator(frame, version, correlation_id)
        elif api_key in self._sidecar.answered_here:
            slot = Slot(self)
            self._slots.append(slot)
            self._dispatch(slot, frame)
        elif api_key in _TXN or (api_key == WRITE_TXN_MARKERS and self.from_peer):
            self._txn(frame, api_key, correlation_id)
        elif api_key in WITHHELD:
            self.abort(f"API {api_key} is not offered in sidecar mode")
        elif api_key == METADATA:
            if version > rewrite.VERSION_CAPS[METADATA]:
                self.abort(f"Metadata v{version} is not offered")
                return
            self._forward(frame, correlation_id, self._rewritten(self._metadata(version, frame)))
        elif api_key == DESCRIBE_CLUSTER:
            if version > rewrite.VERSION_CAPS[DESCRIBE_CLUSTER]:
                self.abort(f"DescribeCluster v{version} is not offered")
                return
            self._forward(frame, correlation_id, self._rewritten(self._describe_cluster(version)))
        elif api_key in _SIGNALLED and sidecar_signal.armed(self._sidecar.server):
            self._signalled(frame, api_key, correlation_id)
        elif api_key == PRODUCE and self._acks(frame, version) == 0:
            slot = Slot(self)
            self._slots.append(slot)
            self._forward(frame, correlation_id, None)  # acks=0: no response will come
            self.complete(slot, b"")
        elif api_key in TOPIC_ADMIN:
            then = self._then_refresh(api_key, version)
            self._forward(frame, correlation_id, self._rewritten(then))
        else:
            if api_key in _SASL:
                self._upstream_sasl = True  # its upstream link must not serve another client
            slot = Slot(self)
            self._slots.append(slot)
            self._forward(frame, correlation_id, slot)

    def _group(self, slot: Slot, frame: bytes) -> None:
        locator = self._sidecar.locator
        if locator is None:
            self._dispatch(slot, frame)
        else:
            self._group_router().route(frame, locator, partial(self.complete, slot))

    def _dispatch(self, slot: Slot, frame: bytes) -> None:
        """Answered here by the server, as a request on its own listener (the gate included)."""
        reply = cast(Connection, LocalReply(self, partial(self.complete, slot)))
        self._sidecar.server.dispatch(reply, frame[4:])

    def _txn(self, frame: bytes, api_key: int, correlation_id: int) -> None:
        """TxnOffsetCommit, answered here; InitProducerId, AddOffsetsToTxn, EndTxn, forwarded
        and read on their way (coordinator.sidecar.txn)."""
        if api_key == TXN_OFFSET_COMMIT:
            slot = Slot(self)
            self._slots.append(slot)
            go = partial(
                self._sidecar.txn.request, self, frame, partial(self.complete, slot),
                self._group_router,
            )  # fmt: skip
            self._held.run(api_key, frame, go)
            return
        if api_key == WRITE_TXN_MARKERS:  # a fleet member's outcome notice
            slot = Slot(self)
            self._slots.append(slot)
            self._sidecar.txn.notice(self, frame, partial(self.complete, slot))
            return
        frame, slot = self._sidecar.txn.observed(self, frame, api_key)
        self._slots.append(slot)
        self._forward(frame, correlation_id, slot)

    def _group_router(self) -> Router:
        router = self._router
        if router is None:
            sidecar = self._sidecar
            router = Router(self, sidecar.server, sidecar.peer_links, self.from_peer)
            self._router = router
        return router

    def _signalled(self, frame: bytes, api_key: int, correlation_id: int) -> None:
        """Fetch/ListOffsets while a topic change is being signalled (coordinator.sidecar.refresh):
        answered here when its client must re-read a changed topic's metadata."""
        slot = Slot(self)
        self._slots.append(slot)
        data = sidecar_signal.local_answer(self._sidecar.server, self, frame)
        if data is not None:
            self.complete(slot, data)
        else:
            self._forward(frame, correlation_id, slot)

    def _rewritten(self, rewrite_fn: Callable[[bytes], bytes]) -> Slot:
        slot = Rewritten(self, rewrite_fn)
        self._slots.append(slot)
        return slot

    def _metadata(self, version: int, request: bytes) -> Callable[[bytes], bytes]:
        def answer(frame: bytes) -> bytes:
            server = self._sidecar.server
            data = self._sidecar.metadata_answer(version, frame)  # may arm the refresh signal
            if sidecar_signal.armed(server):  # this client has now seen what it asked for
                sidecar_signal.metadata_read(server, self, request)
            return data

        return answer

    def _describe_cluster(self, version: int) -> Callable[[bytes], bytes]:
        local = self._sidecar.local_address
        return lambda frame: rewrite.rewrite_describe_cluster(version, frame, local)

    def _then_refresh(self, api_key: int, version: int) -> Callable[[bytes], bytes]:
        """CreateTopics/DeleteTopics/CreatePartitions just happened: re-read the cluster; the
        topics a DeleteTopics deleted are gone at once (Sidecar.observe_metadata)."""
        sidecar = self._sidecar

        def answer(frame: bytes) -> bytes:
            sidecar.refresh_soon()
            if api_key == DELETE_TOPICS:
                try:
                    sidecar.topics_deleted(rewrite.deleted_topics(version, frame, sidecar.topics))
                except RewriteError as exc:  # the refreshes notice the deletion later
                    log.warning("cannot read a DeleteTopics answer: %s", exc)
            return frame

        return answer

    def _acks(self, frame: bytes, version: int) -> int:
        try:
            return rewrite.produce_acks(frame, version)
        except Exception:  # truncated: forward it and let the upstream answer
            return -1

    def _answered_here(self, slot: Slot, data: bytes, api_key: int, t0: int) -> None:
        """`complete`, counted in groupcoord_requests_total as the server counts its answers."""
        self.complete(slot, data)
        stats = self._sidecar.server.stats
        if stats is not None:
            stats.done(api_key, 0, t0)

    def _api_versions(self, frame: bytes) -> None:
        slot = Slot(self)
        self._slots.append(slot)
        stats = self._sidecar.server.stats
        t0 = stats.clock() if stats is not None else 0
        try:
            header, request = codec.decode_request(frame[4:])
        except codec.ApiVersionsUnsupported as exc:
            data = codec.encode_api_versions_unsupported(exc.header)
            self._answered_here(slot, data, API_VERSIONS, t0)
            return
        except codec.DecodeError as exc:
            self.abort(f"malformed request: {exc}")
            return
        version, correlation_id = header.api_version, header.correlation_id
        ranges = self._sidecar.cached_ranges(self._node_id)
        if ranges is not None:
            data = rewrite.api_versions_frame(correlation_id, version, request, ranges)
            self._answered_here(slot, data, API_VERSIONS, t0)
            return

        async def later() -> None:
            try:
                ranges = await self._sidecar.api_ranges(self._node_id)
            except UpstreamUnavailable as exc:
                self.drop(f"upstream unavailable: {exc}")
                return
            data = rewrite.api_versions_frame(correlation_id, version, request, ranges)
            self._answered_here(slot, data, API_VERSIONS, t0)

        self._sidecar.spawn(later())

    def _find_coordinator(self, frame: bytes, version: int, correlation_id: int) -> None:
        try:
            header, request = codec.decode_request(frame[4:])
        except codec.DecodeError as exc:
            self.abort(f"malformed or unsupported FindCoordinator: {exc}")
            return
        if getattr(request, "key_type", _GROUP_KEY) != _GROUP_KEY:  # transactions: upstream's
            local = self._sidecar.local_address
            self._forward(
                frame,
                correlation_id,
                self._rewritten(lambda f: rewrite.rewrite_find_coordinator(version, f, local)),
            )
            return
        slot = Slot(self)
        self._slots.append(slot)
        server = self._sidecar.server
        stats = server.stats
        t0 = stats.clock() if stats is not None else 0
        if server.gate is not None and not self.from_peer:
            judged = cast(Connection, LocalReply(self, partial(self.complete, slot)))
            if server.gate(judged, header, request, t0) is None:
                return  # refused: answered through `judged`
        coordinator = self._sidecar.coordinator()
        data = rewrite.find_coordinator_frame(correlation_id, version, request, coordinator)
        self._answered_here(slot, data, FIND_COORDINATOR, t0)

    # -- forwarding ------------------------------------------------------------------------------

    def _forward(self, frame: bytes, correlation_id: int, slot: Slot | None) -> None:
        link = self._link
        if link is not None:
            link.send(frame, correlation_id, slot)
            return
        if self._queued is None:
            self._queued = []
            self._sidecar.spawn(self._connect())
        self._queued.append((frame, correlation_id, slot))

    async def _connect(self) -> None:
        upstreams = self._sidecar.upstreams
        try:
            if self._node_id is None:
                link = await upstreams.connect_any()
            else:
                broker = upstreams.brokers.get(self._node_id)
                if broker is None:
                    raise UpstreamUnavailable(f"upstream broker {self._node_id} is not known")
                link = await broker.connect()
        except UpstreamUnavailable as exc:
            self._queued = None
            self.drop(f"upstream unavailable: {exc}")
            return
        queued, self._queued = self._queued or [], None
        if self._closed:
            link.broker.release(link)
            return
        link.owner = self
        self._link = link
        for frame, correlation_id, slot in queued:
            link.send(frame, correlation_id, slot)
        if link.paused:
            self.upstream_writable(False)

    # -- LinkOwner -------------------------------------------------------------------------------

    def upstream_writable(self, writable: bool) -> None:
        if writable:
            self._resume(_PAUSED_UPSTREAM)
        else:
            self._pause(_PAUSED_UPSTREAM)

    def upstream_lost(self, link: Link) -> None:
        if link is self._link:
            self._link = None
            self._resume(_PAUSED_UPSTREAM)

    def upstream_failed(self) -> None:
        # A broker connection died under a forwarded request: its partitions are about to get
        # new leaders, so the cluster view is re-read now rather than at the next refresh.
        self._sidecar.refresh_soon()
        self.drop("upstream broker connection lost")

    # -- responses -------------------------------------------------------------------------------

    def first_in_line(self, slot: Slot) -> bool:
        return bool(self._slots) and self._slots[0] is slot

    def write(self, data: bytes) -> None:
        if not self._closed and self._transport is not None:
            self._transport.write(data)

    def complete(self, slot: Slot, data: bytes) -> None:
        """`slot`'s response is ready: send every response now at the head of the order."""
        if self._closed:
            return
        slot.data = data
        slots = self._slots
        if not slots or slots[0] is not slot:
            return
        assert self._transport is not None
        write = self._transport.write
        while slots:
            ready = slots[0].data
            if ready is None or ready is STREAMING:
                break
            slots.popleft()
            if ready:
                if trace.ENABLED:
                    trace.written(self.peer, ready)
                write(ready)
        if self._paused & _PAUSED_PENDING and len(slots) <= MAX_PENDING_REQUESTS // 2:
            self._resume(_PAUSED_PENDING)

    # -- closing and flow control ----------------------------------------------------------------

    def _pause(self, reason: int) -> None:
        if not self._paused and self._transport is not None and not self._closed:
            self._transport.pause_reading()
        self._paused |= reason

    def _resume(self, reason: int) -> None:
        was = self._paused
        self._paused &= ~reason
        if was and not self._paused and self._transport is not None and not self._closed:
            self._transport.resume_reading()

    def abort(self, reason: str, *, quiet: bool = False) -> None:
        """The client sent something we cannot serve: close, as a broker does (`quiet`: the
        caller logged why already)."""
        if self._closed:
            return
        (log.debug if quiet else log.warning)("closing connection from %s: %s", self.peer, reason)
        self._sidecar.server.protocol_errors += 1
        self._close_now()

    def drop(self, reason: str) -> None:
        """The upstream failed: close the client connection so it sees a broker failure."""
        if self._closed:
            return
        # DEBUG: an outage closes every client connection, again as clients retry; the upstream
        # module logs the outage itself once (unreachable / reachable again).
        log.debug("closing connection from %s: %s", self.peer, reason)
        self._close_now()

    def _close_now(self) -> None:
        self._closed = True
        if self._transport is not None:
            self._transport.abort()

    def close(self) -> None:
        if not self._closed and self._transport is not None:
            self._closed = True
            self._transport.close()

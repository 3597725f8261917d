"""Sidecar mode: groupcoord in front of a Kafka-compatible cluster, owning its group coordination.

`groupcoord serve --upstream b1:9092,b2:9092`: clients bootstrap at groupcoord. Produce, Fetch and
every other API go to the upstream brokers through groupcoord; the group APIs, FindCoordinator for
groups and ApiVersions are answered by groupcoord itself.

Listeners: the server's own port is the bootstrap (its requests go to any upstream broker), and
each upstream broker gets a local port of its own (`--broker-port-base` + node id, or an ephemeral
port), opened when a Metadata answer first names the broker. Metadata, DescribeCluster and
transaction FindCoordinator answers are rewritten to name those ports (sidecar.rewrite); group
FindCoordinator names the listener of the lowest-numbered broker, where group requests are answered
locally like everywhere else. A client connection, and what it answers itself, is
coordinator.sidecar.connection.

Invariants:
- Per client connection, responses leave in request order, whether they were answered locally or
  upstream (`Slot` queue). Forwarded requests are pipelined: each is written upstream as soon as
  it is read, on the upstream link the client connection holds, so a producer's in-flight requests
  stay in flight.
- Only request headers are parsed, plus Produce's acks (acks=0 has no response); only the responses
  that carry broker addresses are decoded and re-encoded.
- An upstream link failing under forwarded requests closes the client connections that had
  requests on it (a broker failure, as a client sees one) and nothing else: group APIs keep being
  answered. An upstream that cannot be reached at all is answered here instead, in Kafka's
  retriable terms on an open connection (coordinator.sidecar.dark: ApiVersions, Metadata,
  Produce, Fetch, ListOffsets).
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
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Final

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.metadata.v12.request import MetadataRequest

from coordinator.broker.security_admin import SECURITY_ADMIN_APIS
from coordinator.core.share.coordinator import ShareGroupCoordinator
from coordinator.core.topics import TopicInfo
from coordinator.security.client import PLAINTEXT, ClientSecurity
from coordinator.serve.addresses import parse_upstream
from coordinator.serve.listener import Listening, ports_shared, start_listener
from coordinator.serve.server import CLOSE_TIMEOUT_S, Server
from coordinator.sidecar import dark, rewrite
from coordinator.sidecar.cluster_view import ClusterView
from coordinator.sidecar.connection import SidecarConnection
from coordinator.sidecar.forward import PeerLinks
from coordinator.sidecar.placement import Locator
from coordinator.sidecar.rewrite import (
    API_VERSIONS,
    FIND_COORDINATOR,
    METADATA,
    BrokerAddress,
    Ranges,
    RewriteError,
)
from coordinator.sidecar.share_fetch import ShareService
from coordinator.sidecar.share_state import RuntimeStore, ShareState
from coordinator.sidecar.topic_lookup import TopicLookup, metadata_request
from coordinator.sidecar.traffic import UpstreamCollector
from coordinator.sidecar.txn import TxnOffsets
from coordinator.sidecar.upstream import Upstreams, UpstreamUnavailable
from coordinator.sidecar.upstream_clients import (
    security_from_settings,
)
from coordinator.sidecar.worker_nodes import Owners, WorkerNodes
from coordinator.sidecar.worker_nodes import from_env as worker_nodes_from_env
from protocol import apis

if TYPE_CHECKING:
    from coordinator.serve.http import Observability

__all__ = ["Sidecar", "SidecarConnection", "SidecarOptions", "from_settings"]  # the connection:
# coordinator.sidecar.connection, kept importable from here (fleet, tests)

log = logging.getLogger("groupcoord.sidecar")

# What a sidecar answers itself (groupcoord_requests_total); the rest is forwarded upstream.
_ANSWERED_HERE: Final = (
    apis.GROUP_APIS
    | apis.CONSUMER_GROUP_APIS
    | apis.SHARE_GROUP_APIS
    | {API_VERSIONS, FIND_COORDINATOR}
)
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
        self.owners: Owners | None = None  # the same fleet, as worker_nodes reads it
        # `serve --workers N`: the workers' own coordinator nodes (coordinator.sidecar.worker_nodes)
        self.workers: WorkerNodes | None = None
        self.peer_links = PeerLinks(self.spawn)
        self.txn = TxnOffsets(self)  # TxnOffsetCommit and the transactions it follows (issue 29)
        # KIP-932: ShareFetch/ShareAcknowledge answered here; the store is opened by `start`.
        store = RuntimeStore(lambda: self.server.runtime)  # with the groups' records
        self.share = ShareService(self, ShareState(store, self._share_core))
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
        self._share_hooks()
        self._worker_node()
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
        self.share.state.close()
        for server in self._servers:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wait_closed(), CLOSE_TIMEOUT_S)
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    def _share_hooks(self) -> None:
        runtime = self.server.runtime
        if runtime is not None:  # a share member leaving releases its records: persisted here
            runtime.on_share_updates = self._share_updated
            runtime.on_records = self.share.records_applied

    def _share_updated(self, updates: list[Any]) -> None:
        self.share.state.updated(updates)

    def _share_core(self) -> ShareGroupCoordinator:
        return self.server.core.share

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
        shared = ports_shared()
        try:
            if not 0 <= port <= 65535:
                raise OSError(f"port {port} out of range")
            # Bound now, so the port can be put in the answer being rewritten; the loop starts
            # accepting on it right after (a connection meanwhile waits in the backlog).
            # --workers N: shared by the workers when the port is fixed (--broker-port-base);
            # an ephemeral port is each worker's own, named in its own Metadata answers.
            sock = socket.create_server((host, port), backlog=1024, reuse_port=shared and port > 0)
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

    def _worker_node(self) -> None:
        """A worker of `serve --workers N`: listen on its own node's inherited socket, where
        clients send the groups FindCoordinator names it for (a bootstrap listener otherwise)."""
        found = worker_nodes_from_env(self.server.advertised.host)
        if found is None:
            return
        self.workers, sock = found
        own = self.workers.node(self.workers.index)
        log.info("coordinator node %d listening on port %d", own.node_id, own.port)

        async def serve() -> None:
            factory = partial(SidecarConnection, self, None)
            self._servers.append(await start_listener(factory, None, 0, sock=sock))

        self.spawn(serve())

    def group_coordinator(self, group_id: str) -> BrokerAddress | None:
        """What FindCoordinator names for `group_id`: with `--workers`, the node of the worker
        owning it (coordinator.sidecar.worker_nodes); otherwise `coordinator()`."""
        default = self.coordinator()
        if self.workers is None or default is None:
            return default
        return self.workers.owner(group_id, self.owners)

    def extra_brokers(self) -> list[BrokerAddress]:
        """Listed in Metadata and DescribeCluster answers besides the upstream's brokers: the
        workers' coordinator nodes, which clients must know to connect to them."""
        return [] if self.workers is None else self.workers.nodes()

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

    # -- the upstream down (coordinator.sidecar.dark) --------------------------------------------

    def dark_ranges(self) -> Ranges:
        """ApiVersions' ranges while no upstream broker answers."""
        return dark.api_ranges(self._ranges.values(), self.answered_here)

    def dark_answer(self, frame: bytes) -> bytes | None:
        """A forwarded request's answer while its upstream broker cannot be reached, from the last
        known view: the brokers last seen on their sidecar ports (none before any was seen:
        coordinator.sidecar.dark says why)."""
        brokers = []
        for node_id, broker in sorted(self.upstreams.brokers.items()):
            address = self.local_address(node_id)
            if address is not None:
                brokers.append(BrokerAddress(node_id, address[0], address[1], broker.rack))

        def reachable(node_id: int) -> bool:
            broker = self.upstreams.brokers.get(node_id)
            return broker is not None and broker.reachable and not broker.in_backoff()

        return dark.answer(frame, self.view.topics, self.view.leaders, brokers, reachable)

    # -- rewriting -------------------------------------------------------------------------------

    def metadata_answer(self, version: int, frame: bytes) -> bytes:
        data, response = rewrite.rewrite_metadata(
            version, frame, self.local_address, self.extra_brokers()
        )
        self.observe_metadata(response, full=False)
        return data

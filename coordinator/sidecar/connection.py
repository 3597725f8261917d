"""A client connection on a sidecar listener (coordinator.sidecar.proxy): reads requests, answers
the ones groupcoord answers itself, forwards the rest on the upstream link it holds, and writes
the responses back in request order.

Invariants (the proxy's, for one connection):
- Responses leave in request order, whether answered here or upstream (`Slot` queue); forwarded
  requests are pipelined on the connection's one upstream link.
- Only request headers are parsed, plus Produce's acks (acks=0 has no response); a large request
  that is forwarded streams through (`_on_start`) instead of being held whole.
- Reading pauses while the upstream link cannot take more, or beyond MAX_PENDING_REQUESTS.
- Except on another member's shared fleet link (coordinator.sidecar.fleet_mux), which said so
  with its hello: there answers leave as soon as they are ready, those of one loop turn in one
  write, and a topic look-up holds only the requests of the same client connection tag.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Iterable
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from coordinator.broker.security_admin import SECURITY_ADMIN_APIS
from coordinator.security.acl import ANONYMOUS
from coordinator.serve import group_config_adapters, trace
from coordinator.serve.secure import tls_principal
from coordinator.serve.server import Connection
from coordinator.sidecar import config_split, fleet_mux, rewrite
from coordinator.sidecar import refresh as sidecar_signal
from coordinator.sidecar.forward import Router
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
    FrameStream,
    RewriteError,
    Sink,
)
from coordinator.sidecar.share_fetch import SHARE_APIS
from coordinator.sidecar.slots import STREAMING, LocalReply, Rewritten, Slot
from coordinator.sidecar.topic_lookup import HeldRequests
from coordinator.sidecar.txn import OBSERVED as TXN_OBSERVED
from coordinator.sidecar.txn import TXN_OFFSET_COMMIT
from coordinator.sidecar.txn_notice import WRITE_TXN_MARKERS
from coordinator.sidecar.upstream import Link, UpstreamUnavailable
from protocol import apis, codec
from protocol.framing import FramingError

if TYPE_CHECKING:
    from coordinator.core.topics import TopicInfo
    from coordinator.serve.server import Server
    from coordinator.sidecar.forward import PeerLinks
    from coordinator.sidecar.placement import Locator
    from coordinator.sidecar.rewrite import BrokerAddress, Ranges
    from coordinator.sidecar.share_fetch import ShareService
    from coordinator.sidecar.topic_lookup import TopicLookup
    from coordinator.sidecar.txn import TxnOffsets
    from coordinator.sidecar.upstream import Upstreams

log = logging.getLogger("groupcoord.sidecar")

MAX_PENDING_REQUESTS: Final = 512  # per client connection; reading pauses beyond it
REQUEST_PEEK_BYTES: Final = 512  # read of a large request before streaming it (header, acks)
_SIGNALLED: Final = frozenset({rewrite.FETCH, rewrite.LIST_OFFSETS})
_SASL: Final = frozenset({17, 36})  # SaslHandshake, SaslAuthenticate
# Requests answered here, or whose answers are rewritten: always handled as whole frames.
_WHOLE: Final = (
    apis.GROUP_APIS
    | apis.CONSUMER_GROUP_APIS
    | apis.SHARE_GROUP_APIS
    | WITHHELD
    | TOPIC_ADMIN
    | SECURITY_ADMIN_APIS  # answered here on a secured listener
    | {API_VERSIONS, FIND_COORDINATOR, METADATA, DESCRIBE_CLUSTER, 17, 36}  # 17, 36: SASL
    | {TXN_OFFSET_COMMIT}
    | TXN_OBSERVED  # coordinator.sidecar.txn
    | {WRITE_TXN_MARKERS}  # from a fleet member: an outcome notice (coordinator.sidecar.txn)
    | SHARE_APIS  # coordinator.sidecar.share_fetch
    | apis.GROUP_CONFIG_APIS  # answered here when they name GROUP resources only
)
_GROUP_KEY: Final = 0
_TXN: Final = TXN_OBSERVED | {TXN_OFFSET_COMMIT}
# Group requests: answered by the core here, or routed to the fleet member that owns the group.
# KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe too (issue 23): their records travel
# in the state topic with the classic groups' (coordinator.sidecar.fleet_journal).
# KIP-932's ShareGroupHeartbeat and ShareGroupDescribe the same way.
_GROUP_ROUTED: Final = apis.GROUP_APIS | apis.CONSUMER_GROUP_APIS | apis.SHARE_GROUP_APIS
_IDLE_HOLDS: Final = 1024  # a shared fleet link's per-tag holds kept before idle ones go
_PAUSED_UPSTREAM: Final = 1  # reasons a client connection's reading is paused (bit mask)
_PAUSED_PENDING: Final = 2


def _naming_groups(frame: bytes) -> tuple[codec.RequestHeader, Any] | None:
    """A DescribeConfigs / IncrementalAlterConfigs that names a GROUP resource, decoded; None for
    one that names none, or that this codec cannot read (the upstream answers or closes)."""
    try:
        header, request = codec.decode_request(frame[4:])
    except codec.DecodeError:
        return None
    return (header, request) if group_config_adapters.group_ids(request) else None


class Sidecar(Protocol):
    """What a connection needs of coordinator.sidecar.proxy.Sidecar (which imports this module)."""

    server: Server
    upstreams: Upstreams
    topic_lookup: TopicLookup
    answered_here: frozenset[int]
    locator: Locator | None
    peer_links: PeerLinks
    txn: TxnOffsets
    share: ShareService

    @property
    def topics(self) -> dict[str, TopicInfo]: ...

    @property
    def leaders(self) -> dict[tuple[str, int], int]: ...

    def spawn(self, coro: Any) -> asyncio.Task[Any]: ...

    def refresh_soon(self) -> None: ...

    def topics_deleted(self, names: Iterable[str]) -> None: ...

    def local_address(self, node_id: int) -> tuple[str, int] | None: ...

    def coordinator(self) -> BrokerAddress | None: ...

    def group_coordinator(self, group_id: str) -> BrokerAddress | None: ...

    def extra_brokers(self) -> list[BrokerAddress]: ...

    def cached_ranges(self, node_id: int | None) -> Ranges | None: ...

    async def api_ranges(self, node_id: int | None) -> Ranges: ...

    def metadata_answer(self, version: int, frame: bytes) -> bytes: ...

    def dark_ranges(self) -> Ranges: ...

    def dark_answer(self, frame: bytes) -> bytes | None: ...


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
        # A member's shared link (coordinator.sidecar.fleet_mux): answers leave when ready,
        # those of one loop turn in one write (`_outbox`); look-ups hold requests per client
        # connection tag (`_holds`).
        self.multiplexed = False
        self._tagged: dict[int, HeldRequests] = {}
        self._max_pending = MAX_PENDING_REQUESTS
        self._outbox: list[bytes] = []
        self._held = self._new_holds()
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
        if len(self._slots) > self._max_pending:
            self._pause(_PAUSED_PENDING)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._sidecar.server.connections.discard(cast(Connection, self))
        self._slots.clear()
        self._sidecar.share.connection_closed(self)
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
            self._holds(correlation_id).run(api_key, frame, partial(self._group, slot, frame))
        elif api_key == API_VERSIONS:
            if self.from_peer and not self._slots and fleet_mux.is_hello(frame):
                self._multiplex()
            self._api_versions(frame)
        elif api_key == FIND_COORDINATOR:
            self._find_coordinator(frame, version, correlation_id)
        elif api_key in apis.GROUP_CONFIG_APIS and (named := _naming_groups(frame)) is not None:
            # DescribeConfigs / IncrementalAlterConfigs naming GROUP resources: their configs live
            # here (coordinator.core.handlers.group_configs), routed like a group API; with topic
            # or broker resources beside them, split (coordinator.sidecar.config_split).
            self._group_configs(frame, *named)
        elif api_key in self._sidecar.answered_here:
            slot = Slot(self)
            self._slots.append(slot)
            self._dispatch(slot, frame)
        elif api_key in SHARE_APIS:  # KIP-932: answered here (coordinator.sidecar.share_fetch)
            self._share(frame)
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

    def _share(self, frame: bytes) -> None:
        slot = Slot(self)
        self._slots.append(slot)
        forward = None  # in a fleet: to the group's owner, on this connection's router
        if self._sidecar.locator is not None and not self.from_peer:
            forward = self._group_router().forward
        self._sidecar.share.request(frame, partial(self.complete, slot), self.abort, self, forward)

    def _group(self, slot: Slot, frame: bytes) -> None:
        self._group_to(partial(self.complete, slot), frame)

    def _group_to(self, answer: Callable[[bytes], None], frame: bytes) -> None:
        locator = self._sidecar.locator
        if locator is None:
            reply = cast(Connection, LocalReply(self, answer))
            self._sidecar.server.dispatch(reply, frame[4:])
        else:
            self._group_router().route(frame, locator, answer)

    def _group_configs(self, frame: bytes, header: codec.RequestHeader, request: Any) -> None:
        slot = Slot(self)
        self._slots.append(slot)
        if group_config_adapters.only_groups(request):
            held = self._holds(header.correlation_id)
            held.run(header.api_key, frame, partial(self._group, slot, frame))
        else:
            self._split_configs(slot, header, request)

    def _split_configs(self, slot: Slot, header: codec.RequestHeader, request: Any) -> None:
        """GROUP resources answered here, the others upstream, one merged answer in order."""
        groups, others = config_split.split(request)
        merge = config_split.Merge(header, request, partial(self.complete, slot), self.drop)
        local = codec.encode_request(header, groups)
        held = self._holds(header.correlation_id)
        held.run(header.api_key, local, partial(self._group_to, merge.local, local))
        part = config_split.UpstreamPart(self, merge)
        self._forward(codec.encode_request(header, others), header.correlation_id, part)

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
            self._holds(correlation_id).run(api_key, frame, go)
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
        local, extra = self._sidecar.local_address, self._sidecar.extra_brokers
        return lambda frame: rewrite.rewrite_describe_cluster(version, frame, local, extra())

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
            except UpstreamUnavailable:
                # Answered all the same (coordinator.sidecar.dark), so the client proceeds.
                ranges = self._sidecar.dark_ranges()
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
        coordinator = self._sidecar.group_coordinator
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
            self._answer_dark(str(exc))
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

    def _answer_dark(self, reason: str) -> None:
        """The upstream cannot be reached: answer what waited for it as a broker that lost its
        cluster does (coordinator.sidecar.dark), the connection kept open; the next forwarded
        request tries the upstream again. A request with no such answer closes it, as before."""
        queued, self._queued = self._queued or [], None
        for frame, _, slot in queued:
            if slot is None:
                continue  # an acks=0 Produce: never answered
            data = self._sidecar.dark_answer(frame)
            if data is None:
                self.drop(f"upstream unavailable: {reason}")
                return
            self.complete(slot, data)

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

    def _holds(self, correlation_id: int) -> HeldRequests:
        """Where a group request waits behind its connection's earlier ones while a topic
        look-up is answered: on a shared fleet link, those of its client connection's tag."""
        if not self.multiplexed:
            return self._held
        tag = fleet_mux.tag_of(correlation_id)
        held = self._tagged.get(tag)
        if held is None:
            if len(self._tagged) >= _IDLE_HOLDS:
                self._tagged = {t: h for t, h in self._tagged.items() if not h.idle}
            held = self._tagged[tag] = self._new_holds()
        return held

    def _new_holds(self) -> HeldRequests:
        sidecar = self._sidecar
        max_frame_bytes = sidecar.server.options.max_frame_bytes
        return HeldRequests(sidecar.topic_lookup, max_frame_bytes, lambda: self._closed)

    def _multiplex(self) -> None:
        """A member's shared link said hello (its first request): it matches answers by
        correlation id, so each leaves as soon as it is ready (coordinator.sidecar.fleet_mux)."""
        self.multiplexed = True
        self._slots = fleet_mux.Unordered()
        self._max_pending = fleet_mux.MAX_PENDING

    def first_in_line(self, slot: Slot) -> bool:
        if self.multiplexed:
            return False  # never streamed: whole answers only, between the others
        return bool(self._slots) and self._slots[0] is slot

    def write(self, data: bytes) -> None:
        if not self._closed and self._transport is not None:
            self._transport.write(data)

    def complete(self, slot: Slot, data: bytes) -> None:
        """`slot`'s response is ready: send every response now at the head of the order."""
        if self._closed:
            return
        if self.multiplexed:
            self._unordered(data)
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

    def _unordered(self, data: bytes) -> None:
        cast(fleet_mux.Unordered, self._slots).done()
        if data:
            if trace.ENABLED:
                trace.written(self.peer, data)
            if not self._outbox:
                asyncio.get_running_loop().call_soon(self._flush)
            self._outbox.append(data)
        if self._paused & _PAUSED_PENDING and len(self._slots) <= self._max_pending // 2:
            self._resume(_PAUSED_PENDING)

    def _flush(self) -> None:
        outbox, self._outbox = self._outbox, []
        if outbox and not self._closed and self._transport is not None:
            self._transport.write(outbox[0] if len(outbox) == 1 else b"".join(outbox))

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

"""The asyncio server: accept connections, frame requests, route them, send responses in order.

Rules (STYLE.md; Kafka's broker does the same by muting a channel while a request is in flight):
- One request at a time per connection; responses leave in request order. Frames that arrive
  while a request is in flight wait in the connection's buffer; reading pauses when that buffer is
  large, so a client that pipelines without reading cannot grow our memory.
- A parked JoinGroup/SyncGroup holds only its own connection; every other connection proceeds.
- A peer that sends garbage (bad framing, oversized frames, unknown API keys or versions,
  undecodable bodies) has its connection closed, with one log line; the server keeps serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from typing import TYPE_CHECKING, Any, cast

from kio.schema.errors import ErrorCode

from coordinator.broker import answers as broker
from coordinator.broker import security_admin
from coordinator.broker.security_admin import SECURITY_ADMIN_APIS
from coordinator.broker.topic_admin import TOPIC_ADMIN_APIS
from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator, MemberIdFactory
from coordinator.core.effects import AnyCommand, AnyResult, Effects
from coordinator.core.events import Event
from coordinator.core.messages import (
    CommitPartition,
    CommitTopic,
    Heartbeat,
    HeartbeatResult,
    OffsetCommit,
)
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.security.sasl import credentials_from
from coordinator.serve import adapters, addresses, consumer_adapters, share_refusal, trace
from coordinator.serve.beat_hold import BeatHold, HeldBeat
from coordinator.serve.journal import DiskJournal
from coordinator.serve.lifecycle import OncePerKey
from coordinator.serve.listener import Listening, start_listener
from coordinator.serve.metrics import api_name
from coordinator.serve.runtime import EventSink, Journal, MemoryJournal, Runtime
from coordinator.serve.secure import (
    Gate,
    SecurityOptions,
    illegal_sasl_state,
    secure_connection_class,
)
from coordinator.serve.topic_service import TopicService
from protocol import apis, codec, fastpath
from protocol.codec import RequestHeader
from protocol.framing import FrameBuffer, FramingError

if TYPE_CHECKING:
    from coordinator.serve.metrics import RequestStats

log = logging.getLogger("groupcoord.server")

_API_VERSIONS = apis.API_VERSIONS
_HEARTBEAT = apis.HEARTBEAT
_OFFSET_COMMIT = apis.OFFSET_COMMIT
_CONSUMER_GROUP_HEARTBEAT = apis.CONSUMER_GROUP_HEARTBEAT
_SIZE = struct.Struct(">i")  # a frame's size prefix


DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes
CLOSE_TIMEOUT_S = 5.0  # at stop, for connections to send what is queued for them


@dataclass(slots=True)
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str | None = None
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    coordinator: CoordinatorConfig = field(default_factory=CoordinatorConfig)
    # TLS, SASL and ACLs (coordinator.serve.secure); the default is none of them.
    security: SecurityOptions = field(default_factory=SecurityOptions)


class Connection(asyncio.Protocol):
    __slots__ = (
        "_busy",
        "_closed",
        "_frames",
        "_pumping",
        "_read_paused",
        "_server",
        "_transport",
        "_unread",
        "client_host",
        "fetch_timer",
        "held_beat",
    )
    _fast = True  # the Heartbeat/OffsetCommit fast paths; a secure connection has none

    def __init__(self, server: Server) -> None:
        self._server = server
        # Only while bytes wait to be framed: most reads are exactly one whole request, which
        # needs no buffer (and 10,000 idle connections then hold no buffers; issue 2's RSS).
        self._frames: FrameBuffer | None = None
        self._transport: asyncio.Transport | None = None
        self._busy = False
        self._closed = False
        self._read_paused = False
        self._pumping = False  # inside `_pump`'s loop
        self._unread = False  # the client is not reading its responses (pause_writing)
        self.client_host = "/unknown"
        self.fetch_timer: asyncio.TimerHandle | None = None
        self.held_beat: HeldBeat | None = None  # coordinator.serve.beat_hold

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        peername = transport.get_extra_info("peername")
        if peername:
            # Java's InetAddress.toString(). Interned: thousands of members share a few hosts.
            self.client_host = sys.intern("/" + str(peername[0]))
        self._server.connections.add(self)
        self._server.connections_accepted += 1

    def data_received(self, data: bytes) -> None:
        if self.held_beat is not None:  # a request behind a held beat: the beat goes now
            self._server.beat_hold.now(self)
        frames = self._frames
        if frames is None and not self._busy:
            # Nothing in flight and nothing buffered, so answering at once keeps responses in
            # request order. The fast paths (protocol.fastpath): one whole Heartbeat,
            # ConsumerGroupHeartbeat or OffsetCommit.
            if len(data) > 8 and data[4] == 0 and self._fast:
                max_frame = self._server.options.max_frame_bytes
                if data[5] == _HEARTBEAT:
                    fields = fastpath.parse_heartbeat(data, max_frame)
                    answer = None if fields is None else self._server.heartbeat_frame(self, fields)
                    if answer is not None:
                        self.write(answer)
                        return
                elif data[5] == _CONSUMER_GROUP_HEARTBEAT:
                    beat = fastpath.parse_consumer_heartbeat(data, max_frame)
                    if beat is not None and self._server.runtime is not None:
                        self._busy = True  # answered when its records are durable
                        self._server.fast_consumer_beat(self, beat)
                        return
                elif data[5] == _OFFSET_COMMIT:
                    commit = fastpath.parse_offset_commit(
                        data, max_frame, adapters.fast_commit, CommitTopic, CommitPartition
                    )
                    if commit is not None:
                        self._busy = True  # answered when its records are durable
                        if self._server.fast_offset_commit(self, *commit):
                            return
                        self._busy = False
            # Exactly one whole frame of an acceptable size: no buffer. Anything else (a size
            # to refuse included) goes through the FrameBuffer, which has the rules.
            if len(data) >= 4:
                size = _SIZE.unpack_from(data)[0]
                if size + 4 == len(data) and size <= self._server.options.max_frame_bytes:
                    self._busy = True
                    self._server.dispatch(self, data[4:])
                    return
        if frames is None:
            frames = self._frames = FrameBuffer(self._server.options.max_frame_bytes)
        try:
            frames.feed(data)
        except FramingError as exc:
            self.abort(f"bad framing: {exc}")
            return
        self._pump()

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._server.connections.discard(self)
        self._server.beat_hold.drop(self)
        if self.fetch_timer is not None:
            self.fetch_timer.cancel()
            self.fetch_timer = None

    def pause_writing(self) -> None:
        """The client has not read 64 KiB of responses: take no more of its requests until it
        does, so pipelined requests cannot pile up responses in our memory (Kafka stops reading
        a channel whose send is incomplete the same way). Reading pauses here, so no bytes
        arrive meanwhile; what is already buffered waits in `_pump`."""
        self._unread = True
        self._flow_control()

    def resume_writing(self) -> None:
        self._unread = False
        self._pump()

    @property
    def peer(self) -> str:
        """host:port of the client, for log lines (not stored: it costs memory per connection)."""
        peername = None if self._transport is None else self._transport.get_extra_info("peername")
        return f"{peername[0]}:{peername[1]}" if peername else "?"

    # -- request flow ----------------------------------------------------------------------------

    def _pump(self) -> None:
        if self._pumping:
            # Called from `send` inside the loop below (a request answered synchronously): the
            # loop goes on. Recursing overflowed the stack on a few hundred pipelined requests.
            return
        frames = self._frames
        self._pumping = True
        try:
            while frames is not None and not self._busy and not self._closed and not self._unread:
                try:
                    frame = frames.next_frame()
                except FramingError as exc:
                    self.abort(f"bad framing: {exc}")
                    return
                if frame is None:
                    break
                self._busy = True
                self._server.dispatch(self, frame)
        finally:
            self._pumping = False
        if frames is not None and not frames.buffered_bytes and frames is self._frames:
            self._frames = None
        self._flow_control()

    def _flow_control(self) -> None:
        if self._transport is None or self._closed:
            return
        buffered = 0 if self._frames is None else self._frames.buffered_bytes
        limit = self._server.read_pause_bytes
        if not self._read_paused and (buffered > limit or self._unread):
            self._read_paused = True
            self._transport.pause_reading()
        elif self._read_paused and buffered <= limit // 2 and not self._unread:
            self._read_paused = False
            self._transport.resume_reading()

    def send(self, data: bytes) -> None:
        """The response to the in-flight request; the next buffered request may start."""
        if self._closed or self._transport is None:
            return
        if trace.ENABLED:
            trace.written(self.peer, data)
        self._transport.write(data)
        self._busy = False
        if self._frames is not None or self._read_paused:
            self._pump()

    def write(self, data: bytes) -> None:
        """A response to a request that was never in flight (the heartbeat fast path)."""
        if not self._closed and self._transport is not None:
            if trace.ENABLED:
                trace.written(self.peer, data)
            self._transport.write(data)

    def abort(self, reason: str, *, quiet: bool = False) -> None:
        """The client sent something we cannot serve: close at once, as a broker does. `quiet`:
        the caller logged why already (at DEBUG here)."""
        if not self._closed:
            self._server.protocol_errors += 1
            self.drop(reason, quiet=quiet)

    def drop(self, reason: str, *, quiet: bool = False) -> None:
        """Close at once, dropping queued writes, for a reason that is not the client's protocol
        error (a stop that the client holds up by not reading; a bug on our side). Also ends a
        connection that `close` is still flushing: that is the stop's case."""
        if self._transport is None or self not in self._server.connections:
            return  # connection_lost came already
        (log.debug if quiet else log.warning)("closing connection from %s: %s", self.peer, reason)
        self._closed = True
        self._transport.abort()

    def close(self) -> None:
        """Orderly close: flush what was written, then disconnect."""
        if not self._closed and self._transport is not None:
            self._closed = True
            self._transport.close()

    @property
    def closed(self) -> bool:
        return self._closed


# A request's handler: (connection, header, decoded request, its arrival clock for stats).
Route = Callable[[Connection, RequestHeader, Any, int], None]


class Server:
    """Owns the listening socket, the connections, and routes each request."""

    def __init__(
        self,
        options: ServerOptions,
        catalog: TopicCatalog,
        new_member_id: MemberIdFactory,
        journal: Journal | None = None,
        core: GroupCoordinator | None = None,
    ) -> None:
        self.options = options
        self.catalog = catalog
        self.connections: set[Connection] = set()
        self.protocol_errors = 0
        self.refusals = OncePerKey(log)  # unsupported API versions, logged once per client
        self.heartbeats = 0  # a plain counter: the hot path makes no prometheus call
        self.connections_accepted = 0
        self.load_seconds: float | None = None  # the last log replay (metrics)
        self.stats: RequestStats | None = None  # coordinator.serve.metrics.install sets it
        self.read_pause_bytes = max(1 << 20, min(options.max_frame_bytes, 16 << 20))
        # reply_to -> (connection, header, adapters.error_context, perf_counter_ns at arrival or 0)
        self._pending: dict[int, tuple[Connection, RequestHeader, object, int]] = {}
        # The fast path's commits and consumer beats, for _submit_commits.
        self._commits: list[tuple[int, AnyCommand]] = []
        self.beat_hold = BeatHold(lambda: self.core, self._held_beat_due)
        # Requests that read the topic catalog, held while the log loads (`_after_load`).
        self._held: list[tuple[Route, Connection, RequestHeader, Any, int]] = []
        self._new_member_id = new_member_id
        security = options.security
        # Every request passes the gate when a security feature is on (None: nothing to check).
        self.gate: Gate | None = None
        if security.active:
            self.gate = Gate(self, security, credentials_from(security.users))
        self.core = core or self._new_core()
        if self.gate is not None:
            self.gate.configure(self.core.state.security)
        self.journal = journal or MemoryJournal()
        self._recovering: asyncio.Task[None] | None = None
        self.runtime: Runtime | None = None
        self._server: Listening | None = None
        self.advertised = broker.Advertised(options.advertised_host or options.host, options.port)
        # Whoever wants the core's events (metrics, logs, the history log) adds a sink here.
        self.event_sinks: list[EventSink] = []
        # Topic admin APIs, `topic_changed`, and the metadata refresh signal (issue 4).
        self.topic_service = TopicService(self)
        self.routes = self._build_routes()
        # Readiness beyond "listening and loaded": the sidecar's upstream, a sidecar fleet's
        # state partitions (coordinator.sidecar.proxy, coordinator.sidecar.fleet).
        self.ready_check: Callable[[], tuple[bool, str]] | None = None
        # The fleet's /fleet document (coordinator.sidecar.fleet.Fleet.status), when in a fleet.
        self.fleet_status: Callable[[], dict[str, Any]] | None = None
        # The sidecar's /upstream document (coordinator.sidecar.proxy.Sidecar.upstream_status).
        self.upstream_status: Callable[[], dict[str, Any]] | None = None
        # What serves an accepted connection; sidecar mode (coordinator.sidecar.proxy) sets its own.
        connection = secure_connection_class(Connection) if self.gate is not None else Connection
        self.protocol_factory: Callable[[], asyncio.Protocol] = lambda: connection(self)

    def _emit(self, event: Event) -> None:
        for sink in self.event_sinks:
            sink(event)

    def _new_core(self) -> GroupCoordinator:
        # Record timestamps are wall-clock; the core's clock is the loop's monotonic one.
        epoch_offset_ms = int(time.time() * 1000) - int(time.monotonic() * 1000)
        core = GroupCoordinator(
            self.options.coordinator, self.catalog, self._new_member_id, epoch_offset_ms
        )
        if self.gate is not None:
            self.gate.configure(core.state.security)
        return core

    async def start(self) -> None:
        """Listen first, then load: while the log replays, FindCoordinator works and group APIs
        answer COORDINATOR_LOAD_IN_PROGRESS (docs/protocol.md §12.3)."""
        loop = asyncio.get_running_loop()
        self.runtime = Runtime(
            self.core,
            self.journal,
            respond=self._respond,
            fail=self._fail,
            events=self._emit,
            on_write_failure=self._on_write_failure,
            loop=loop,
        )
        self.runtime.after_apply = self.beat_hold.wake
        self.core.loading = True
        context = self.options.security.ssl_context
        if context is None:
            self._server = await start_listener(
                self.protocol_factory, self.options.host, self.options.port
            )
        else:  # TLS: the loop's own transports (coordinator.serve.secure)
            self._server = await loop.create_server(
                self.protocol_factory,
                self.options.host,
                self.options.port,
                ssl=context,
                reuse_address=True,
                backlog=1024,
            )
        sock = self._server.sockets[0]
        host, port = sock.getsockname()[:2]
        if self.options.port == 0:
            self.options.port = port
        advertised_host = addresses.advertised_host(self.options.advertised_host, host)
        self.advertised = broker.Advertised(advertised_host, port)
        log.info("listening on %s:%d", host, port)
        await self._load(self.core)

    @property
    def listening(self) -> bool:
        """The Kafka listener accepts connections (false before start and once stop began)."""
        return self._server is not None and self._server.is_serving()

    async def _load(self, core: GroupCoordinator) -> None:
        started = time.monotonic()
        count = 0
        if isinstance(self.journal, DiskJournal):
            count = await self.journal.load(core)
        assert self.runtime is not None
        core.finish_loading(self.runtime.now_ms())
        # Compare the groups' stored topic hashes, reconcile the declared topics, arm the timers.
        self.runtime.apply(self.topic_service.loaded(core, self.runtime.now_ms()))
        self.load_seconds = time.monotonic() - started
        log.info("loaded %d records in %.3f s", count, self.load_seconds)
        held, self._held = self._held, []
        for handler, conn, header, request, t0 in held:
            if not conn.closed:
                handler(conn, header, request, t0)

    def _after_load(
        self, handler: Route, conn: Connection, header: RequestHeader, request: Any, t0: int
    ) -> bool:
        """True (and `handler` runs once the log is loaded) while it loads. The topic catalog is
        complete only then (the log's changes come after the declared topics): a Metadata
        answered meanwhile can show fewer partitions than a client saw before a restart, and
        its leader assigns only those (seen with aiokafka after a kill -9). Kafka's brokers read
        their metadata log before they listen; this server listens at once (for the group APIs'
        COORDINATOR_LOAD_IN_PROGRESS), so the catalog's readers wait. One request is in flight
        per connection, so holding one keeps the responses in order."""
        if not self.core.loading:
            return False
        self._held.append((handler, conn, header, request, t0))
        return True

    def _on_write_failure(self, exc: BaseException) -> None:
        if self._recovering is None or self._recovering.done():
            self._recovering = asyncio.get_running_loop().create_task(self._recover())

    async def _recover(self) -> None:
        """After a failed write (the log refuses appends; memory may be ahead of it): retry the
        disk with backoff, then rebuild the core from the log, as a Kafka coordinator does when
        its partition moves (parked requests get NOT_COORDINATOR; clients rediscover, rejoin)."""
        if not isinstance(self.journal, DiskJournal):
            return
        await self.journal.recover()
        for reply_to in list(self._pending):
            self._fail(reply_to, RuntimeError("coordinator reloaded"))
        self.topic_service.reset_catalog()
        core = self._new_core()
        core.loading = True
        assert self.runtime is not None
        self.runtime.core = self.core = core
        await self._load(core)
        log.warning("log recovered; state reloaded from disk")

    async def stop(self, drain_timeout_s: float | None = None) -> None:
        """Graceful stop (uvicorn's order): stop accepting; release the replies held for
        durability (up to `drain_timeout_s`); answer what is still parked with NOT_COORDINATOR,
        on which clients re-discover the coordinator (docs/protocol.md §9.1); close the
        connections after their queued writes."""
        if self._server is not None:
            self._server.close()
        if self._recovering is not None:
            self._recovering.cancel()
        if self.runtime is not None:
            with contextlib.suppress(TimeoutError):  # shield: a late fsync still releases
                await asyncio.wait_for(asyncio.shield(self.runtime.drain()), drain_timeout_s)
            self.runtime.close()
        for held in self.beat_hold.close():  # held beats and joins: answered as parked ones
            self._not_coordinator(cast(Connection, held.conn), held.header, None, held.t0)
        for reply_to in list(self._pending):
            self._fail(reply_to, RuntimeError("shutting down"))
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            try:
                await asyncio.wait_for(self._server.wait_closed(), CLOSE_TIMEOUT_S)
            except TimeoutError:  # a client that never reads cannot hold the stop forever
                for conn in list(self.connections):
                    conn.drop("shutting down: the client did not read its responses")
                await self._server.wait_closed()

    # -- routing ---------------------------------------------------------------------------------

    def heartbeat_frame(self, conn: Any, fields: fastpath.HeartbeatFields) -> bytes | None:
        """The answer to a Heartbeat the fast path parsed, from `conn` (its `peer`, for the
        trace); None without a runtime: take the general path. A fleet owner's too."""
        runtime = self.runtime
        if runtime is None:
            return None
        version, correlation_id, group_id, generation_id, member_id, instance_id = fields
        if trace.ENABLED:
            trace.read(conn.peer, _HEARTBEAT, version, correlation_id)
        command = Heartbeat(group_id, generation_id, member_id, instance_id)
        result = self._heartbeat(runtime, command)
        return codec.heartbeat_response_frame(version, correlation_id, result.error)

    def fast_consumer_beat(self, conn: Connection, beat: fastpath.ConsumerHeartbeatFields) -> None:
        """Into the core as `_group_api` would (KIP-848's beat), batched with the pass's commits
        (`fast_offset_commit`): one append and one timer re-arm per pass, not per beat."""
        assert self.runtime is not None  # data_received takes the fast path only with one
        header, command = consumer_adapters.fast_command(beat, conn.client_host)
        t0 = self.stats.clock() if self.stats is not None else 0
        if not self.beat_hold.park(conn, header, command, t0):  # a waiting member's beat waits
            join = command if command.member_epoch == 0 else None  # its answer may wait
            self._into_batch(self.runtime, conn, header, join, command, t0)

    def _held_beat_due(self, held: HeldBeat) -> None:
        conn = cast(Connection, held.conn)
        if self.runtime is not None and not conn.closed:
            self._into_batch(self.runtime, conn, held.header, held.context, held.command, held.t0)

    def fast_offset_commit(
        self, conn: Connection, header: RequestHeader, command: OffsetCommit
    ) -> bool:
        """Take an OffsetCommit parsed by the fast path, as `dispatch` would after kio and the
        adapter; False = take the general path. A pass's commits go into the core together
        (`_submit_commits`: one Effects, one append), saving about a tenth of a commit's cost."""
        if self.runtime is None:
            return False
        t0 = self.stats.clock() if self.stats is not None else 0
        self._into_batch(self.runtime, conn, header, command, command, t0)  # command: context
        return True

    def _into_batch(
        self,
        runtime: Runtime,
        conn: Connection,
        header: RequestHeader,
        context: object,
        command: AnyCommand,
        t0: int,
    ) -> None:
        """Queue a fast-path request for `_submit_commits`, after this pass of the loop."""
        if trace.ENABLED:
            trace.read(conn.peer, *astuple(header))
        reply_to = runtime.new_reply_to()
        self._pending[reply_to] = (conn, header, context, t0)
        batch = self._commits
        batch.append((reply_to, command))
        if len(batch) == 1:
            asyncio.get_running_loop().call_soon(self._submit_commits)

    def _submit_commits(self) -> None:
        commits, self._commits = self._commits, []
        assert self.runtime is not None  # set before the fast path takes anything
        try:
            self.runtime.submit_many(commits)
        except Exception:
            # A bug, as when a request handled on its own raises (coordinator.serve.listener then
            # closes that connection): close the connections whose commits were in the batch.
            log.exception("a batch of %d offset commits and consumer beats failed", len(commits))
            for reply_to, _ in commits:
                entry = self._pending.pop(reply_to, None)
                if entry is not None:
                    entry[0].drop("offset commit or consumer heartbeat failed")

    def _submit(
        self,
        conn: Connection,
        header: RequestHeader,
        error_context: object,
        command: AnyCommand,
        t0: int,
    ) -> None:
        """Into the core; answered by `_respond` (or `_fail`, from `error_context`)."""
        runtime = self.runtime
        assert runtime is not None  # the callers answer without it while there is none
        reply_to = runtime.new_reply_to()
        self._pending[reply_to] = (conn, header, error_context, t0)
        runtime.submit(reply_to, command)

    def _heartbeat(self, runtime: Runtime, command: Heartbeat) -> HeartbeatResult:
        stats = self.stats
        if stats is None:
            result = runtime.heartbeat(command)
        else:
            result = stats.heartbeat(runtime, command, self.heartbeats)
        self.heartbeats += 1
        return result

    def dispatch(self, conn: Connection, frame: bytes) -> None:
        stats = self.stats
        t0 = stats.clock() if stats is not None else 0
        try:
            header, request = codec.decode_request(frame)
        except codec.UnsupportedVersion as exc:
            if exc.header.api_key == _API_VERSIONS:
                conn.send(codec.encode_api_versions_unsupported(exc.header))
            elif not share_refusal.refused(conn, exc.header):  # standalone: no share groups
                self._unsupported(conn, exc.header)
            return
        except codec.DecodeError as exc:
            conn.abort(f"malformed request: {exc}")
            return
        if trace.ENABLED:
            trace.read(
                conn.peer,
                header.api_key,
                header.api_version,
                header.correlation_id,
                header.client_id,
            )
        gate = self.gate
        if gate is not None:
            request = gate(conn, header, request, t0)
            if request is None:
                return  # answered, or the connection closed
        self.routes[header.api_key](conn, header, request, t0)

    def _unsupported(self, conn: Connection, header: RequestHeader) -> None:
        """An API or version we do not serve: close the connection, as a broker does; logged
        once per client and request kind (lifecycle.OncePerKey): such a client asks again."""
        name = api_name(header.api_key)
        spec = apis.APIS.get(header.api_key)
        served = f"v{spec.min_version}-v{spec.max_version} only" if spec else "not at all"
        self.refusals.log(
            (conn.client_host, header.client_id, header.api_key, header.api_version),
            "refusing %s v%d from %s (client id %r): groupcoord serves %s %s; closing its "
            "connections (the client is too old, or configured with an old api_version)",
            name, header.api_version, conn.client_host.lstrip("/"), header.client_id, name, served,
        )  # fmt: skip
        conn.abort(f"unsupported API {name} v{header.api_version}", quiet=True)

    # -- the routes: one handler per advertised API (`_build_routes`) ----------------------------

    def _build_routes(self) -> dict[int, Route]:
        """API key -> handler, for exactly the APIs of protocol.apis.API_TABLE (which ApiVersions
        is derived from): advertised == routed, checked here and by a test."""
        routes: dict[int, Route] = dict.fromkeys(apis.GROUP_APIS, self._group_api)
        routes.update(dict.fromkeys(apis.CONSUMER_GROUP_APIS, self._group_api))  # KIP-848
        routes.update(
            dict.fromkeys(apis.SHARE_GROUP_APIS | apis.GROUP_CONFIG_APIS, self._group_api)
        )
        routes.update(dict.fromkeys(TOPIC_ADMIN_APIS, self._topic_admin))
        routes[apis.API_VERSIONS] = self._api_versions
        routes[apis.METADATA] = self._metadata
        routes[apis.FIND_COORDINATOR] = self._find_coordinator
        routes[apis.LIST_OFFSETS] = self._list_offsets
        routes[apis.FETCH] = self._fetch
        routes[apis.PRODUCE] = self._produce
        routes.update(dict.fromkeys(SECURITY_ADMIN_APIS, self._security_admin))
        routes[apis.SASL_HANDSHAKE] = routes[apis.SASL_AUTHENTICATE] = self._sasl
        if routes.keys() != apis.APIS.keys():
            raise AssertionError(f"routed {sorted(routes)} != advertised {sorted(apis.APIS)}")
        return routes

    def _group_api(self, conn: Connection, header: RequestHeader, request: Any, t0: int) -> None:
        """The group APIs, classic and KIP-848: the core's commands (coordinator.serve.adapters)."""
        stats = self.stats
        command = adapters.to_command(header, request, conn.client_host)
        if not isinstance(command, adapters.COMMAND_TYPES):
            conn.send(codec.encode_response(header, command))  # the adapter answered it
            if stats is not None:
                stats.done(header.api_key, getattr(command, "error_code", 0), t0)
            return
        assert self.runtime is not None
        if type(command) is Heartbeat:
            result = self._heartbeat(self.runtime, command)
            conn.send(codec.encode_heartbeat_response(header, result.error))
            return
        context = adapters.error_context(header, request)
        self._submit(conn, header, context, command, t0)

    def _answered(self, conn: Connection, header: RequestHeader, response: Any, t0: int) -> None:
        """Send a broker-view answer (these carry no top-level error code to count)."""
        conn.send(codec.encode_response(header, response))
        self._done(header, t0)

    def _done(self, header: RequestHeader, t0: int) -> None:
        if self.stats is not None:
            self.stats.done(header.api_key, 0, t0)

    def _api_versions(self, conn: Connection, header: RequestHeader, request: Any, t0: int) -> None:
        self._answered(conn, header, codec.api_versions_response(header, request), t0)

    def _metadata(self, conn: Connection, header: RequestHeader, request: Any, t0: int) -> None:
        if self._after_load(self._metadata, conn, header, request, t0):
            return
        response = broker.metadata_response(
            header.api_version, request, self.catalog, self.advertised
        )
        self._answered(conn, header, response, t0)
        self.topic_service.metadata_read(conn, header, request)

    def _find_coordinator(
        self, conn: Connection, header: RequestHeader, request: Any, t0: int
    ) -> None:
        response = broker.find_coordinator_response(header.api_version, request, self.advertised)
        self._answered(conn, header, response, t0)

    def _list_offsets(self, conn: Connection, header: RequestHeader, request: Any, t0: int) -> None:
        if self._after_load(self._list_offsets, conn, header, request, t0):
            return
        self._answered(conn, header, self.topic_service.list_offsets(conn, header, request), t0)

    def _fetch(self, conn: Connection, header: RequestHeader, request: Any, t0: int) -> None:
        if self._after_load(self._fetch, conn, header, request, t0):
            return
        self.topic_service.fetch(conn, header, request)  # answered now or after max_wait
        self._done(header, t0)

    def _produce(self, conn: Connection, header: RequestHeader, request: Any, t0: int) -> None:
        if self._after_load(self._produce, conn, header, request, t0):
            return
        refusal = broker.produce_response(header.api_version, request, self.catalog)
        # Some clients show only the code ("Broker: Invalid request"): the reason, once a client.
        topics, who, cid = {t.name for t in request.topic_data}, conn.client_host, header.client_id
        why = "refusing Produce to %s from %s (client id %r): " + broker.PRODUCE_REFUSED
        self.refusals.log((who, cid, 0), why, ",".join(sorted(topics)), who.lstrip("/"), cid)
        # acks=0 has no answer; an empty send frees the connection for its next request.
        conn.send(b"" if refusal is None else codec.encode_response(header, refusal))
        self._done(header, t0)

    def _topic_admin(self, conn: Connection, header: RequestHeader, request: Any, t0: int) -> None:
        self.topic_service.admin(conn, header, request)  # answered once durable
        self._done(header, t0)

    def _sasl(self, conn: Connection, header: RequestHeader, request: Any, t0: int) -> None:
        """SaslHandshake/SaslAuthenticate: the gate's, on a SASL listener; elsewhere Kafka's
        answer to SASL on a connection that is not doing it: ILLEGAL_SASL_STATE."""
        if self.gate is not None:
            self.gate.sasl(conn, header, request)
        else:
            conn.send(codec.encode_response(header, illegal_sasl_state(header)))
        self._done(header, t0)

    def _security_admin(
        self, conn: Connection, header: RequestHeader, request: Any, t0: int
    ) -> None:
        """ACLs and SCRAM credentials (coordinator.broker.security_admin): records in the log,
        answered once durable."""
        runtime = self.runtime
        assert runtime is not None
        outcome = security_admin.handle(
            header.api_key,
            header.api_version,
            request,
            self.core.state.security,
            self.options.security.authorizer,
        )
        if self.core.loading:  # the state is not complete yet: clients retry on this
            response = outcome.failed(ErrorCode.coordinator_load_in_progress)
            conn.send(codec.encode_response(header, response or outcome.build()))
            return
        if self.gate is not None and outcome.records:
            self.gate.changed(conn, header, outcome.records)

        def done() -> None:
            conn.send(codec.encode_response(header, outcome.build()))
            self._done(header, t0)

        def failed(exc: BaseException) -> None:
            log.error("security change not durable (%s); answering NOT_CONTROLLER", exc)
            conn.send(codec.encode_response(header, outcome.failed(ErrorCode.not_controller)))

        runtime.apply_then(Effects(records=outcome.records), done, failed)

    def topic_changed(self, name: str, info: TopicInfo | None, keep_offsets: bool = False) -> None:
        """Topic `name` now looks like `info` (None: deleted), whatever told us (the sidecar's
        upstream metadata, an operator): updates the catalog and persists it through the core and
        the runtime; groups reading it rebalance if its hash changed (core.topic_watch).
        `keep_offsets`: a deletion not certain yet; `delete_topic_offsets` finishes it."""
        self.topic_service.topic_changed(name, info, keep_offsets)

    def delete_topic_offsets(self, name: str) -> None:
        self.topic_service.delete_offsets(name)

    def _respond(self, reply_to: int, result: AnyResult) -> None:
        entry = self._pending.pop(reply_to, None)
        if entry is None:
            return
        conn, header, context, t0 = entry
        if context is not None and header.api_key == _CONSUMER_GROUP_HEARTBEAT and not conn.closed:
            if (answer := self.beat_hold.answered(conn, header, context, result, t0)) is None:
                return  # a join waiting for its partitions (coordinator.serve.beat_hold)
            result = answer
        if self.stats is not None:
            self.stats.answered(header.api_key, result, t0)
        if conn.closed:
            return
        conn.send(adapters.response_frame(header, result))

    def _fail(self, reply_to: int, exc: BaseException) -> None:
        """The records this reply depended on are not durable: answer with the error Kafka maps
        a failed coordinator write to (docs/protocol.md §9.1), which clients retry on."""
        entry = self._pending.pop(reply_to, None)
        if entry is not None:
            self._not_coordinator(*entry)

    def _not_coordinator(
        self, conn: Connection, header: RequestHeader, request: object, t0: int
    ) -> None:
        if self.stats is not None:
            self.stats.done(header.api_key, ErrorCode.not_coordinator, t0)
        if not conn.closed:
            response = adapters.error_response(header, request, ErrorCode.not_coordinator)
            conn.send(codec.encode_response(header, response))

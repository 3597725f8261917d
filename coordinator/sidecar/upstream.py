"""Connections to the upstream brokers of sidecar mode: pooled, pipelined, reconnected with backoff.

- `Link`: one TCP connection to one upstream broker. Requests are written as they come
  (pipelined); the broker answers a connection's requests in order (Kafka's broker mutes a channel
  while a request is in flight, so its responses are FIFO), and each response goes to the callback
  registered with its request, after its correlation id is checked against that request's.
- `Broker`: one upstream broker: its address, a pool of idle links, its reconnect backoff, its
  ApiVersions, and a control link for the sidecar's own requests (Metadata refresh, ListOffsets).
- `Upstreams`: the brokers by node id (learnt from Metadata) and the bootstrap addresses.

Invariants:
- A link carries one client connection's requests at a time (the pool hands out idle links only),
  so client correlation ids pass through unchanged and stay unique on the link; only the sidecar's
  own control requests use ids of its own.
- A link that fails hands None to every callback still waiting, at once: the client connection it
  serves is then closed, which is how a broker failure looks to a Kafka client. Nothing waits on a
  dead upstream: connecting has a deadline, and after a failed attempt a broker is not tried again
  until its backoff has passed (doubling from 50 ms to 1 s, like Kafka's reconnect.backoff.ms and
  reconnect.backoff.max.ms); attempts in between fail at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections import deque
from collections.abc import Callable
from typing import Any, Final, Protocol, cast

from coordinator.security.client import PLAINTEXT, ClientSecurity
from coordinator.sidecar import rewrite
from coordinator.sidecar.rewrite import BrokerAddress, FrameStream, RewriteError, Sink
from coordinator.sidecar.traffic import ApiTraffic, UpstreamStats
from coordinator.sidecar.upstream_clients import (
    UpstreamAuthError,
    authenticate,
)
from protocol.framing import FramingError

log = logging.getLogger("groupcoord.upstream")

ResponseCallback = Callable[[bytes | None], None]
CLIENT_ID: Final = "groupcoord-sidecar"
CONNECT_TIMEOUT_S: Final = 5.0
CONTROL_TIMEOUT_S: Final = 10.0
BACKOFF_MIN_S: Final = 0.05
BACKOFF_MAX_S: Final = 1.0
MAX_IDLE_LINKS: Final = 16
# Responses can be as large as a Fetch allows (fetch.max.bytes, 50 MiB by default) and more.
MAX_RESPONSE_BYTES: Final = 1 << 30
_CORRELATION: Final = struct.Struct(">i")
_API_KEY: Final = struct.Struct(">h")  # a request frame's, after its size prefix
# A request waiting for its response: correlation id, callback, and for a forwarded request the
# traffic counters of its API and when it was sent (coordinator.sidecar.traffic).
_Waiting = tuple[int, ResponseCallback | None, ApiTraffic | None, int]


class UpstreamUnavailable(Exception):
    """No connection to the upstream broker could be had (now)."""


class LinkOwner(Protocol):
    """The client connection a link serves: told when the link cannot take more bytes."""

    def upstream_writable(self, writable: bool) -> None: ...

    def upstream_lost(self, link: Link) -> None: ...


class Link(asyncio.Protocol):
    __slots__ = (
        "_current",
        "_out",
        "_stream",
        "_waiting",
        "broker",
        "closed",
        "owner",
        "paused",
        "stats",
        "transport",
    )

    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.stats = broker.stats  # None: nothing counted (a fleet's peer links)
        self.transport: asyncio.Transport | None = None
        self._stream = FrameStream(self._on_frame, self._on_start, MAX_RESPONSE_BYTES, 8)
        self._waiting: deque[_Waiting] = deque()
        # The callback of the response being received (taken off _waiting when its header came)
        # and, when that response streams through, where its bytes go.
        self._current: ResponseCallback | None = None
        self._out: Sink | None = None
        self.owner: LinkOwner | None = None
        self.closed = False
        self.paused = False  # its transport's buffer is full (pause_writing)

    @property
    def in_flight(self) -> int:
        return len(self._waiting) + (self._current is not None)

    def expect(
        self,
        correlation_id: int,
        callback: ResponseCallback | None,
        api_key: int = -1,
        nbytes: int = 0,
    ) -> None:
        """A request with this correlation id is about to be written: `callback` gets its
        framed response, or None if the link fails first. If the callback has a `begin()`
        returning a Sink, a large response streams to that sink instead. Produce with acks=0
        passes None: Kafka sends no answer to it, but some brokers (tansu) do, so an answer with
        its correlation id is expected and dropped. A forwarded request names its `api_key` and
        size: it is counted in `stats` (coordinator.sidecar.traffic)."""
        if self.closed or self.transport is None:
            if callback is not None:
                callback(None)
            return
        stats = self.stats
        if stats is None or api_key < 0:
            self._waiting.append((correlation_id, callback, None, 0))
        else:
            traffic = stats.sent(api_key, nbytes)
            self._waiting.append((correlation_id, callback, traffic, stats.clock()))

    def write(self, data: bytes) -> None:
        if not self.closed and self.transport is not None:
            self.transport.write(data)

    def send(self, frame: bytes, correlation_id: int, callback: ResponseCallback | None) -> None:
        """`expect` + `write` for a whole framed client request (counted as forwarded)."""
        self.expect(correlation_id, callback, _API_KEY.unpack_from(frame, 4)[0], len(frame))
        self.write(frame)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self._fail()

    # -- asyncio.Protocol ------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        try:
            self._stream.feed(data)
        except FramingError as exc:
            self._protocol_error(f"bad response framing: {exc}")

    def _take(self, correlation_id: int, nbytes: int) -> bool:
        """Take the callback the response with this correlation id (`nbytes` long) answers;
        False (and the link closed) when the stream is out of step."""
        waiting = self._waiting
        while True:
            if not waiting:
                self._protocol_error(f"a response (id {correlation_id}) nobody asked for")
                return False
            entry = waiting.popleft()
            expected, callback, traffic, sent_ns = entry
            if expected == correlation_id:
                self._current = callback
                if traffic is not None:
                    traffic.answered(nbytes, sent_ns)
                return True
            if callback is not None:
                waiting.appendleft(entry)
                self._protocol_error(f"correlation id {correlation_id} where {expected} was due")
                return False
            # An acks=0 Produce that got no answer, as Kafka's broker does; skip it.

    def _on_frame(self, frame: bytes) -> None:
        if self.closed:
            return
        if self._current is None and not self._take(
            _CORRELATION.unpack_from(frame, 4)[0], len(frame)
        ):
            return
        callback, self._current = self._current, None
        if callback is not None:  # (an answer to acks=0, as tansu gives, is dropped)
            callback(frame)

    def _on_start(self, data: bytes, pos: int, total: int) -> Sink | None:
        """A large response's header is here: stream it if its receiver can take it now."""
        if self.closed or not self._take(_CORRELATION.unpack_from(data, pos + 4)[0], total):
            return None
        begin = getattr(self._current, "begin", None)
        out = begin() if begin is not None else None
        if out is None:
            return None  # collected whole; _on_frame then hands it to self._current
        self._out = out
        return _ResponseSink(self, out)

    def end(self) -> None:
        """Sink for a request streaming to the upstream (`write`): nothing to do at its end."""

    def _response_streamed(self) -> None:
        self._current = self._out = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail()

    def pause_writing(self) -> None:
        self.paused = True
        if self.owner is not None:
            self.owner.upstream_writable(False)

    def resume_writing(self) -> None:
        self.paused = False
        if self.owner is not None:
            self.owner.upstream_writable(True)

    # --------------------------------------------------------------------------------------------

    def _protocol_error(self, reason: str) -> None:
        log.warning("upstream %s: %s; closing the link", self.broker.label, reason)
        self.close()

    def _fail(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.broker.link_lost(self)
        waiting, self._waiting = self._waiting, deque()
        current, self._current, self._out = self._current, None, None
        for callback in [current, *(entry[1] for entry in waiting)]:
            if callback is not None:
                callback(None)
        if self.owner is not None:
            owner, self.owner = self.owner, None
            owner.upstream_lost(self)


class _ResponseSink:
    """A response streaming from the upstream to the client connection waiting for it."""

    __slots__ = ("_link", "_out")

    def __init__(self, link: Link, out: Sink) -> None:
        self._link = link
        self._out = out

    def write(self, piece: bytes) -> None:
        self._out.write(piece)

    def end(self) -> None:
        self._link._response_streamed()
        self._out.end()


class Broker:
    """One upstream broker (or bootstrap address, node_id -1 until Metadata names it)."""

    def __init__(
        self,
        host: str,
        port: int,
        node_id: int = -1,
        stats: UpstreamStats | None = None,
        security: ClientSecurity = PLAINTEXT,
    ) -> None:
        self.host = host
        self.port = port
        self.node_id = node_id
        # TLS and SASL of every link (a fleet's peer links: mutual TLS with a secured listener,
        # coordinator.sidecar.fleet_tls; never SASL)
        self.security = security
        self.stats = stats  # its links count what they forward there (None: nothing counted)
        self.rack: str | None = None
        self.api_versions: dict[int, tuple[int, int]] | None = None
        self._idle: list[Link] = []
        self._control: Link | None = None
        self._control_seq = 0
        self._control_lock = asyncio.Lock()
        self._backoff_s = 0.0
        self._retry_at = 0.0
        self._last_error = ""  # why the last connection attempt failed

    @property
    def label(self) -> str:
        node = f" (node {self.node_id})" if self.node_id >= 0 else ""
        return f"{self.host}:{self.port}{node}"

    def in_backoff(self) -> bool:
        return asyncio.get_running_loop().time() < self._retry_at

    @property
    def reachable(self) -> bool:
        """False from a failed connection attempt until one succeeds (the metrics' broker_up)."""
        return self._backoff_s == 0.0

    async def connect(self, make: Callable[[Broker], Link] = Link) -> Link:
        """An idle pooled link, or a new one (`make`: a new one of that kind, never pooled: a
        fleet's shared link, coordinator.sidecar.fleet_mux). Raises UpstreamUnavailable at once
        while in backoff, or when connecting fails or takes longer than CONNECT_TIMEOUT_S."""
        while self._idle and make is Link:
            link = self._idle.pop()
            if not link.closed:
                return link
        loop = asyncio.get_running_loop()
        if loop.time() < self._retry_at:
            raise UpstreamUnavailable(f"{self.label}: {self._last_error} (retrying)")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):  # (not wait_for: see below)
                link = await self._open(loop, make)
        except (OSError, TimeoutError, UpstreamAuthError) as exc:
            first = self._backoff_s == 0.0
            self._backoff_s = min(max(self._backoff_s * 2, BACKOFF_MIN_S), BACKOFF_MAX_S)
            self._retry_at = loop.time() + self._backoff_s
            self._last_error = str(exc) or type(exc).__name__
            if first:
                log.warning("upstream %s unreachable: %s", self.label, self._last_error)
            raise UpstreamUnavailable(f"{self.label}: {self._last_error}") from exc
        if self._backoff_s:
            log.info("upstream %s reachable again", self.label)
        self._backoff_s = 0.0
        return link

    async def _open(self, loop: asyncio.AbstractEventLoop, make: Callable[[Broker], Link]) -> Link:
        """A new link: TLS when the upstream's security says so, then SASL before any request
        of a client or of ours goes on it (coordinator.sidecar.upstream_clients)."""
        security = self.security
        context = security.ssl_context
        _, link = await loop.create_connection(
            lambda: make(self),
            self.host,
            self.port,
            ssl=context,
            server_hostname=self.host if context is not None else None,
        )
        if security.sasl:
            try:
                await authenticate(lambda entity: self._call(link, entity), security)
            except BaseException:
                link.close()
                raise
        return link

    def _send(self, link: Link, entity: Any) -> asyncio.Future[bytes | None]:
        """Write one request of ours on `link`: its framed response, or None if the link fails
        (not counted as forwarded traffic)."""
        self._control_seq = (self._control_seq + 1) & 0x7FFFFFFF
        correlation_id = self._control_seq
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()

        def done(frame: bytes | None) -> None:
            if not future.done():
                future.set_result(frame)

        link.expect(correlation_id, done)
        link.write(rewrite.encode_request(entity, correlation_id, CLIENT_ID))
        return future

    async def _call(self, link: Link, entity: Any) -> Any:
        """One request of ours on `link`, awaited and decoded (SASL on a fresh link)."""
        frame = await self._send(link, entity)
        if frame is None:
            raise OSError("connection lost during SASL authentication")
        cls = type(entity)
        try:
            return rewrite.decode_response(cls.__api_key__, cls.__version__, frame)
        except RewriteError as exc:
            raise OSError(f"undecodable SASL answer: {exc}") from None

    def release(self, link: Link) -> None:
        """Back to the pool if it is healthy and idle; closed otherwise."""
        link.owner = None
        if link.closed or link.in_flight or link.paused or len(self._idle) >= MAX_IDLE_LINKS:
            link.close()
        else:
            self._idle.append(link)

    def link_lost(self, link: Link) -> None:
        if link is self._control:
            self._control = None
        with contextlib.suppress(ValueError):
            self._idle.remove(link)

    def close(self) -> None:
        for link in [*self._idle, *([self._control] if self._control else [])]:
            link.close()
        self._idle.clear()

    async def request(self, entity: Any) -> bytes:
        """The sidecar's own request on the control link: the framed response.
        Raises UpstreamUnavailable when the broker cannot be reached or does not answer."""
        async with self._control_lock:  # one control link, however many ask at once
            link = self._control
            if link is None or link.closed:
                link = self._control = await self.connect()
        future = self._send(link, entity)
        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for can drop a cancellation that
            # races the answer, and a task being stopped would then go on.
            async with asyncio.timeout(CONTROL_TIMEOUT_S):
                frame = await future
        except TimeoutError:
            link.close()  # the link is out of step now; a new one is made next time
            raise UpstreamUnavailable(f"{self.label}: no answer in {CONTROL_TIMEOUT_S} s") from None
        if frame is None:
            raise UpstreamUnavailable(f"{self.label}: connection lost")
        return frame

    async def call(self, entity: Any, timeout_s: float = CONTROL_TIMEOUT_S) -> bytes:
        """The sidecar's own request on a pooled link of its own, not the control link: a
        long-polling Fetch (coordinator.sidecar.share_upstream) must not hold up the others.
        Raises UpstreamUnavailable."""
        link = await self.connect()
        future = self._send(link, entity)
        try:
            async with asyncio.timeout(timeout_s):
                frame = await future
        except TimeoutError:
            link.close()
            raise UpstreamUnavailable(f"{self.label}: no answer in {timeout_s} s") from None
        except BaseException:
            link.close()  # cancelled while it waited: the link is out of step
            raise
        if frame is None:
            raise UpstreamUnavailable(f"{self.label}: connection lost")
        self.release(link)
        return frame


class Upstreams:
    """The upstream cluster as the sidecar knows it: brokers by node id, and the bootstrap list."""

    def __init__(
        self, bootstrap: list[tuple[str, int]], security: ClientSecurity = PLAINTEXT
    ) -> None:
        self.security = security
        self.stats = UpstreamStats()  # what clients' requests forward (coordinator.sidecar.traffic)
        self._by_address: dict[tuple[str, int], Broker] = {}
        self.bootstrap = [self._broker_at(host, port) for host, port in bootstrap]
        self.brokers: dict[int, Broker] = {}

    def _broker_at(self, host: str, port: int) -> Broker:
        broker = self._by_address.get((host, port))
        if broker is None:
            broker = self._by_address[host, port] = Broker(
                host, port, stats=self.stats, security=self.security
            )
        return broker

    def update(self, addresses: list[BrokerAddress]) -> list[int]:
        """Learn the brokers a Metadata response lists; returns node ids seen for the first time.
        Brokers absent from the list are kept (a partial view must not drop them)."""
        new = []
        for address in addresses:
            broker = self.brokers.get(address.node_id)
            if broker is None or (broker.host, broker.port) != (address.host, address.port):
                if broker is None:
                    new.append(address.node_id)
                broker = self._broker_at(address.host, address.port)
                broker.node_id = address.node_id
                self.brokers[address.node_id] = broker
            broker.rack = address.rack
        return new

    def candidates(self) -> list[Broker]:
        """Brokers to try for a request any broker can answer: known ones by node id, then the
        bootstrap addresses; those in backoff last."""
        seen: dict[int, Broker] = {}
        for broker in [*(self.brokers[n] for n in sorted(self.brokers)), *self.bootstrap]:
            seen.setdefault(id(broker), broker)
        ordered = list(seen.values())
        return [b for b in ordered if not b.in_backoff()] + [b for b in ordered if b.in_backoff()]

    async def connect_any(self) -> Link:
        errors = []
        for broker in self.candidates():
            try:
                return await broker.connect()
            except UpstreamUnavailable as exc:
                errors.append(str(exc))
        raise UpstreamUnavailable("; ".join(errors) or "no upstream broker")

    async def request_any(self, entity: Any) -> tuple[Broker, bytes]:
        errors = []
        for broker in self.candidates():
            try:
                return broker, await broker.request(entity)
            except UpstreamUnavailable as exc:
                errors.append(str(exc))
        raise UpstreamUnavailable("; ".join(errors) or "no upstream broker")

    def close(self) -> None:
        for broker in self._by_address.values():
            broker.close()

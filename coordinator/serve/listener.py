"""The Kafka port's listener: every connection in one epoll set, which the loop watches as one fd.

Why not `loop.create_server` (issue 2: under 2 KB of RSS a member, one connection each): uvloop's
transport costs 1.24 KB per idle connection before a byte is read (measured with a do-nothing
Protocol: TCPTransport 680 B, uv_tcp_t 248 B, a weak ref, a bound method, a list, a dict slot),
and `loop.add_reader` per socket still 0.76 KB. With one epoll set of our own, registered with the
loop through a single `add_reader`, a connection costs its transport object and a dict slot:
0.17 KB measured the same way (the epoll item itself lives in kernel memory). The loop is still
uvloop: timers, the log's I/O thread, the HTTP server and upstream links all run on it as before.

Rules:
- Asyncio's Transport/Protocol contract, for the part the Kafka connections use:
  `connection_made` first; `data_received` with bytes as they arrive; `eof_received`, closing
  unless it returns true; `pause_writing`/`resume_writing` around a write buffer over
  64 KiB/under 16 KiB; `connection_lost` exactly once, from a fresh loop callback, after the fd is
  closed. `close()` flushes queued writes first; `abort()` does not.
- Level-triggered. An fd is in the epoll set only while it wants something (reading not paused,
  or bytes queued to write), so a paused connection whose peer hung up cannot spin the loop
  (libuv stops polling an idle handle the same way).
- `data_received` raising is a bug: it is reported to the loop's exception handler and closes
  that connection only; the rest of the batch is served.
- Linux only (epoll). Elsewhere `start_listener` returns the loop's own server.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import select
import socket
from collections.abc import Callable
from typing import Any, Protocol

log = logging.getLogger("groupcoord.listener")

READ_BYTES = 65536  # os.read allocates this much and shrinks it; 256 KiB would be an mmap a read
EVENTS_PER_POLL = 1024  # level-triggered: what is left is reported again on the next pass
ACCEPTS_PER_WAKE = 256
ACCEPT_RETRY_S = 1.0  # asyncio's pause after EMFILE and friends
HIGH_WATER_BYTES = 64 * 1024  # asyncio's defaults
LOW_WATER_BYTES = 16 * 1024

_IN = select.EPOLLIN if hasattr(select, "EPOLLIN") else 1
_OUT = select.EPOLLOUT if hasattr(select, "EPOLLOUT") else 4
_TROUBLE = (select.EPOLLERR | select.EPOLLHUP) if hasattr(select, "EPOLLERR") else 0x18
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class Listening(Protocol):
    """What the server needs of a listener: ours, or asyncio's Server where epoll is missing."""

    @property
    def sockets(self) -> tuple[socket.socket, ...]: ...

    def close(self) -> None: ...

    def is_serving(self) -> bool: ...

    async def wait_closed(self) -> None: ...


class _Ports:
    shared = False  # this process is one of `serve --workers N` (coordinator.sidecar.workers)


def share_ports() -> None:
    """From now on the client and broker listeners bind with SO_REUSEPORT, so that the N workers
    of `serve --workers N` accept on the same ports and the kernel spreads connections over them.
    Only then: a second groupcoord started by mistake on a taken port must fail, not share it."""
    _Ports.shared = True


def ports_shared() -> bool:
    return _Ports.shared


async def start_listener(
    factory: Callable[[], asyncio.Protocol],
    host: str | None,
    port: int,
    *,
    sock: socket.socket | None = None,
    backlog: int = 1024,
) -> Listening:
    """Listen on `sock`, or on every address `host` resolves to, and serve `factory`'s protocols."""
    loop = asyncio.get_running_loop()
    if not hasattr(select, "epoll"):
        if sock is not None:
            return await loop.create_server(factory, sock=sock)
        return await loop.create_server(
            factory, host, port, reuse_address=True, reuse_port=_Ports.shared or None
        )
    socks = [sock] if sock is not None else await _bind(loop, host, port, backlog)
    listener = Listener(loop, factory, socks)
    listener.start()
    return listener


async def _bind(
    loop: asyncio.AbstractEventLoop, host: str | None, port: int, backlog: int
) -> list[socket.socket]:
    """asyncio's create_server binding: each address `host` names (all interfaces for ''/None),
    SO_REUSEADDR, IPv6 sockets v6-only so that 0.0.0.0 and :: can both be bound."""
    infos = await loop.getaddrinfo(
        host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )
    socks: list[socket.socket] = []
    try:
        for family, type_, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, type_, proto)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if _Ports.shared:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            # Port 0: the first address picks a free port and the others bind the same one
            # (asyncio's create_server would give each address its own, and clients one port).
            sock.bind((address[0], port, *address[2:]))
            port = sock.getsockname()[1]
        for sock in socks:
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


class Listener:
    """Accepts on its sockets; owns the epoll set and every connection's transport."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        factory: Callable[[], asyncio.Protocol],
        socks: list[socket.socket],
    ) -> None:
        self.loop = loop
        self._factory = factory
        self._socks = socks
        self._serving = False
        self.epoll = select.epoll()
        self.transports: dict[int, Transport] = {}
        self._emptied: asyncio.Future[None] | None = None

    @property
    def sockets(self) -> tuple[socket.socket, ...]:
        return tuple(self._socks)

    def start(self) -> None:
        self.loop.add_reader(self.epoll.fileno(), self._on_ready)
        for sock in self._socks:
            sock.setblocking(False)
            self.loop.add_reader(sock.fileno(), self._accept, sock)
        self._serving = True

    def is_serving(self) -> bool:
        return self._serving

    def close(self) -> None:
        """Stop accepting (open connections stay, as with asyncio.Server.close)."""
        if not self._serving:
            return
        self._serving = False
        for sock in self._socks:
            self.loop.remove_reader(sock.fileno())
            sock.close()

    async def wait_closed(self) -> None:
        """Once closed: wait until every connection is gone, then release the epoll set."""
        if self._serving:
            return
        if self.transports:
            if self._emptied is None:
                self._emptied = self.loop.create_future()
            await asyncio.shield(self._emptied)
        if not self.epoll.closed:
            self.loop.remove_reader(self.epoll.fileno())
            self.epoll.close()

    def forget(self, fd: int) -> None:
        del self.transports[fd]
        if not self.transports and self._emptied is not None and not self._emptied.done():
            self._emptied.set_result(None)

    # -- loop callbacks --------------------------------------------------------------------------

    def _accept(self, sock: socket.socket) -> None:
        for _ in range(ACCEPTS_PER_WAKE):
            try:
                conn, peername = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in _OUT_OF_RESOURCES:
                    # asyncio's answer: say so, stop accepting for a second, try again.
                    log.error("accept failed (%s); pausing accepts for %.0f s", exc, ACCEPT_RETRY_S)
                    self.loop.remove_reader(sock.fileno())
                    self.loop.call_later(ACCEPT_RETRY_S, self._resume_accepting, sock)
                    return
                continue  # ECONNABORTED and the like: that client gave up, not our problem
            if conn.family in (socket.AF_INET, socket.AF_INET6):
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as asyncio does
            conn.setblocking(False)
            fd = conn.detach()
            try:
                transport = Transport(self, fd, peername)
            except Exception as exc:
                os.close(fd)
                report = {"message": "protocol factory failed", "exception": exc}
                self.loop.call_exception_handler(report)
                continue
            try:
                transport.start()
            except Exception as exc:
                self.loop.call_exception_handler(
                    {"message": "connection_made failed", "exception": exc, "protocol": transport}
                )
                transport.abort()

    def _resume_accepting(self, sock: socket.socket) -> None:
        if self._serving:
            self.loop.add_reader(sock.fileno(), self._accept, sock)

    def _on_ready(self) -> None:
        try:
            events = self.epoll.poll(0, EVENTS_PER_POLL)
        except InterruptedError:
            return
        get = self.transports.get
        read = os.read
        for fd, mask in events:
            transport = get(fd)
            if transport is None:
                continue  # closed earlier in this batch
            if mask == _IN and transport.wants & _IN:
                # Inlined: the common event, bytes to read and nothing else (a request).
                try:
                    data = read(fd, READ_BYTES)
                except OSError as exc:
                    transport.read_failed(exc)
                    continue
                try:
                    if data:
                        transport.protocol.data_received(data)
                    else:
                        transport.on_eof()
                except Exception as exc:
                    self._callback_failed(transport, exc)
                continue
            try:
                if mask & _OUT or (mask & _TROUBLE and transport.wants & _OUT):
                    transport.on_writable()
                if mask & (_IN | _TROUBLE) and transport.wants & _IN:
                    transport.on_readable()
            except Exception as exc:
                self._callback_failed(transport, exc)

    def _callback_failed(self, transport: Transport, exc: Exception) -> None:
        self.loop.call_exception_handler(
            {"message": "protocol callback failed", "exception": exc, "protocol": transport}
        )
        transport.abort()


class Transport:
    """One accepted connection: asyncio.Transport's methods over a raw non-blocking fd."""

    __slots__ = (
        "_buffer",
        "_closing",
        "_listener",
        "_new_peername",
        "_reading",
        "_writing_paused",
        "fd",
        "protocol",
        "wants",
    )

    def __init__(self, listener: Listener, fd: int, peername: Any) -> None:
        self._listener = listener
        self.fd = fd
        self.protocol: asyncio.Protocol = listener._factory()
        self.wants = 0  # the epoll mask registered; 0 = not in the set
        self._buffer: bytearray | None = None  # bytes waiting for the socket to drain
        self._reading = True
        self._closing = False
        self._writing_paused = False
        # Kept only through connection_made: 10,000 address tuples would cost 1.5 MB.
        self._new_peername = peername

    def start(self) -> None:
        self._listener.transports[self.fd] = self
        try:
            self.protocol.connection_made(self)  # type: ignore[arg-type]
        finally:
            self._new_peername = None
        if not self._closing:
            self._update()

    # -- asyncio.Transport -----------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        buffer = self._buffer
        if buffer is None:
            try:
                sent = os.write(self.fd, data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._fail(exc)
                return
            if sent == len(data):
                return
            self._buffer = buffer = bytearray(memoryview(data)[sent:])
            self._update()
        else:
            buffer += data
        if len(buffer) > HIGH_WATER_BYTES and not self._writing_paused:
            self._writing_paused = True
            self.protocol.pause_writing()

    def writelines(self, chunks: list[bytes]) -> None:
        self.write(b"".join(chunks))

    def pause_reading(self) -> None:
        if self._reading and not self._closing:
            self._reading = False
            self._update()

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._update()

    def is_reading(self) -> bool:
        return self._reading and not self._closing

    def close(self) -> None:
        """Stop reading; close once the queued writes are out."""
        if self._closing:
            return
        self._closing = True
        if self._buffer is None:
            self._finish(None)
        else:
            self._update()

    def abort(self) -> None:
        if self.fd < 0:
            return
        self._closing = True
        self._buffer = None
        self._finish(None)

    def is_closing(self) -> bool:
        return self._closing

    def get_write_buffer_size(self) -> int:
        return 0 if self._buffer is None else len(self._buffer)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername" and self._new_peername is not None:
            return self._new_peername
        if name in ("peername", "sockname") and self.fd >= 0:
            sock = socket.socket(fileno=self.fd)  # a view of our fd, detached again below
            try:
                return sock.getpeername() if name == "peername" else sock.getsockname()
            except OSError:
                return default
            finally:
                sock.detach()
        return default

    # -- the listener's calls --------------------------------------------------------------------

    def on_readable(self) -> None:
        try:
            data = os.read(self.fd, READ_BYTES)
        except OSError as exc:
            self.read_failed(exc)
            return
        if data:
            self.protocol.data_received(data)
        else:
            self.on_eof()

    def on_eof(self) -> None:
        if self.protocol.eof_received():
            self._reading = False  # half-closed: the protocol still writes
            self._update()
        else:
            self.close()

    def read_failed(self, exc: OSError) -> None:
        if not isinstance(exc, (BlockingIOError, InterruptedError)):
            self._fail(exc)

    def on_writable(self) -> None:
        buffer = self._buffer
        if buffer is None:
            return
        try:
            sent = os.write(self.fd, buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._fail(exc)
            return
        del buffer[:sent]
        if not buffer:
            self._buffer = None
            if self._closing:
                self._finish(None)
                return
            self._update()
        if self._writing_paused and len(buffer) <= LOW_WATER_BYTES:
            self._writing_paused = False
            self.protocol.resume_writing()

    # -- internals -------------------------------------------------------------------------------

    def _update(self) -> None:
        """Register in the epoll set exactly what this connection waits for now."""
        wants = (_IN if self._reading and not self._closing else 0) | (
            _OUT if self._buffer is not None else 0
        )
        if wants == self.wants or self.fd < 0:
            return
        epoll = self._listener.epoll
        if not self.wants:
            epoll.register(self.fd, wants)
        elif not wants:
            epoll.unregister(self.fd)
        else:
            epoll.modify(self.fd, wants)
        self.wants = wants

    def _fail(self, exc: OSError) -> None:
        log.debug("connection error: %s", exc)
        self._closing = True
        self._buffer = None
        self._finish(exc)

    def _finish(self, exc: Exception | None) -> None:
        fd = self.fd
        if fd < 0:
            return
        if self.wants:
            self._listener.epoll.unregister(fd)
            self.wants = 0
        self.fd = -1
        self._listener.forget(fd)
        os.close(fd)
        self._listener.loop.call_soon(self.protocol.connection_lost, exc)

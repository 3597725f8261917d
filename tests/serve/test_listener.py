"""The epoll listener keeps asyncio's Transport/Protocol contract over real sockets.

serve.listener replaces uvloop's per-connection transport on the Kafka port (issue 2's RSS
target); these tests hold it to what the server and sidecar protocols rely on: bytes in order both
ways, write buffering with pause_writing/resume_writing, pause_reading, close after the queued
writes, abort without them, EOF and resets, a failing protocol closing only its own connection,
and a stop that waits for connections. Last, the Kafka connection on top of it: a client that
pipelines requests and never reads the responses stops being read, so it cannot grow our memory.
"""

from __future__ import annotations

import asyncio
import select
import socket
import struct
from typing import Any

import pytest

from coordinator.core.topics import TopicCatalog
from coordinator.serve import listener as listener_mod
from coordinator.serve import server as server_mod
from coordinator.serve.listener import Listener, start_listener
from coordinator.serve.server import Server, ServerOptions
from tests.support.realclients import wait_until

pytestmark = pytest.mark.skipif(not hasattr(select, "epoll"), reason="the listener needs epoll")


class Recorder(asyncio.Protocol):
    """Keeps what happened to it; echoes when asked to."""

    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self.transport: Any = None
        self.data = bytearray()
        self.calls: list[str] = []
        self.lost: list[BaseException | None] = []
        self.fail_on: bytes | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.calls.append("made")
        self.peername = transport.get_extra_info("peername")

    def data_received(self, data: bytes) -> None:
        if self.fail_on is not None and self.fail_on in data:
            raise RuntimeError("protocol bug")
        self.data += data
        if self.echo:
            self.transport.write(data)

    def eof_received(self) -> bool | None:
        self.calls.append("eof")
        return None

    def pause_writing(self) -> None:
        self.calls.append("pause_writing")

    def resume_writing(self) -> None:
        self.calls.append("resume_writing")

    def connection_lost(self, exc: Exception | None) -> None:
        self.calls.append("lost")
        self.lost.append(exc)


class Fixture:
    def __init__(self, echo: bool = False) -> None:
        self.echo = echo
        self.protocols: list[Recorder] = []
        self.listener: Any = None

    def factory(self) -> Recorder:
        protocol = Recorder(self.echo)
        self.protocols.append(protocol)
        return protocol

    async def start(self) -> int:
        self.listener = await start_listener(self.factory, "127.0.0.1", 0)
        assert isinstance(self.listener, Listener)
        return int(self.listener.sockets[0].getsockname()[1])

    async def connect(
        self, port: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, Recorder]:
        count = len(self.protocols)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await wait_until(lambda: len(self.protocols) > count, 5, "the server to accept")
        return reader, writer, self.protocols[count]


@pytest.fixture
async def served() -> Any:
    fixture = Fixture(echo=True)
    port = await fixture.start()
    yield fixture, port
    fixture.listener.close()
    for protocol in fixture.protocols:
        protocol.transport.abort()
    await asyncio.wait_for(fixture.listener.wait_closed(), 5)


async def test_bytes_go_both_ways_in_order_and_the_peer_is_named(served: Any) -> None:
    fixture, port = served
    reader, writer, protocol = await fixture.connect(port)
    payload = bytes(range(256)) * 2000  # 512 KB: many reads on our side
    writer.write(payload)
    echoed = await asyncio.wait_for(reader.readexactly(len(payload)), 10)
    assert echoed == payload
    assert protocol.peername == writer.get_extra_info("sockname")
    assert protocol.transport.get_extra_info("peername") == writer.get_extra_info("sockname")
    assert protocol.transport.get_extra_info("sockname")[1] == port
    writer.close()


async def test_a_slow_reader_gets_every_byte_with_pause_and_resume_writing(served: Any) -> None:
    fixture, port = served
    reader, writer, protocol = await fixture.connect(port)
    transport = protocol.transport
    chunk = b"x" * 65536
    for i in range(64):  # 4 MB, far beyond the socket buffers: most of it is queued by us
        transport.write(struct.pack(">I", i) + chunk)
    assert transport.get_write_buffer_size() > listener_mod.HIGH_WATER_BYTES
    assert protocol.calls.count("pause_writing") == 1
    for i in range(64):
        block = await asyncio.wait_for(reader.readexactly(4 + len(chunk)), 10)
        assert struct.unpack(">I", block[:4])[0] == i
    await wait_until(lambda: "resume_writing" in protocol.calls, 5, "resume_writing")
    assert transport.get_write_buffer_size() == 0
    assert transport.wants == select.EPOLLIN  # nothing left to write: no EPOLLOUT interest
    writer.close()


async def test_pause_reading_holds_bytes_until_resumed(served: Any) -> None:
    fixture, port = served
    _, writer, protocol = await fixture.connect(port)
    protocol.transport.pause_reading()
    assert protocol.transport.wants == 0  # out of the epoll set: a hang-up cannot spin the loop
    writer.write(b"held")
    await writer.drain()
    # Proof by contrast: a second connection's bytes arrive while the first one's do not.
    _, writer2, protocol2 = await fixture.connect(port)
    writer2.write(b"other")
    await wait_until(lambda: bytes(protocol2.data) == b"other", 5, "the other connection's bytes")
    assert protocol.data == b""
    protocol.transport.resume_reading()
    await wait_until(lambda: bytes(protocol.data) == b"held", 5, "the held bytes")
    writer.close()
    writer2.close()


async def test_close_sends_what_is_queued_first_and_reports_lost_once(served: Any) -> None:
    fixture, port = served
    reader, writer, protocol = await fixture.connect(port)
    transport = protocol.transport
    payload = b"y" * (4 << 20)
    transport.write(payload)
    transport.close()
    transport.close()
    transport.write(b"dropped: written after close")
    assert transport.is_closing()
    received = await asyncio.wait_for(reader.read(), 10)  # to EOF
    assert received == payload
    await wait_until(lambda: protocol.calls[-1:] == ["lost"], 5, "connection_lost")
    assert protocol.lost == [None]
    assert fixture.listener.transports == {}
    writer.close()


async def test_abort_drops_what_is_queued(served: Any) -> None:
    fixture, port = served
    reader, writer, protocol = await fixture.connect(port)
    protocol.transport.write(b"z" * (4 << 20))
    protocol.transport.abort()
    received = await asyncio.wait_for(reader.read(), 10)
    assert len(received) < 4 << 20
    await wait_until(lambda: protocol.lost == [None], 5, "connection_lost")
    writer.close()


async def test_peer_eof_and_peer_reset_each_end_the_connection(served: Any) -> None:
    fixture, port = served
    _, writer, protocol = await fixture.connect(port)
    writer.write_eof()
    await wait_until(lambda: protocol.calls[-2:] == ["eof", "lost"], 5, "EOF then lost")
    assert protocol.lost == [None]

    raw = socket.create_connection(("127.0.0.1", port))
    await wait_until(lambda: len(fixture.protocols) == 2, 5, "the second accept")
    reset = fixture.protocols[1]
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    raw.close()  # RST
    await wait_until(lambda: reset.calls[-1:] == ["lost"], 5, "lost after a reset")
    assert len(reset.lost) == 1
    assert reset.lost[0] is None or isinstance(reset.lost[0], ConnectionResetError)
    writer.close()


async def test_a_failing_protocol_closes_only_its_connection(
    served: Any, caplog: pytest.LogCaptureFixture
) -> None:
    fixture, port = served
    reader_ok, writer_ok, ok = await fixture.connect(port)
    reader_bad, writer_bad, bad = await fixture.connect(port)
    bad.fail_on = b"boom"
    writer_bad.write(b"boom")
    writer_ok.write(b"fine")
    assert await asyncio.wait_for(reader_bad.read(), 5) == b""  # closed by us
    assert await asyncio.wait_for(reader_ok.readexactly(4), 5) == b"fine"
    assert bad.lost == [None] and ok.lost == []
    assert "protocol callback failed" in caplog.text
    writer_ok.close()
    writer_bad.close()


async def test_stop_waits_for_connections_to_flush_then_releases_the_epoll_set() -> None:
    fixture = Fixture()
    port = await fixture.start()
    reader, writer, protocol = await fixture.connect(port)
    listener = fixture.listener
    listener.close()
    assert not listener.is_serving()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)
    protocol.transport.write(b"w" * (4 << 20))
    waiting = asyncio.ensure_future(listener.wait_closed())
    await asyncio.sleep(0)
    protocol.transport.close()
    assert not waiting.done()  # the queued 4 MB are not out yet
    received = await asyncio.wait_for(reader.read(), 10)
    assert len(received) == 4 << 20
    await asyncio.wait_for(waiting, 5)
    assert listener.epoll.closed
    writer.close()


async def test_a_client_that_never_reads_stops_being_read_until_it_does() -> None:
    server = Server(
        ServerOptions(host="127.0.0.1", port=0), TopicCatalog(()), lambda p: f"{p}-x", None
    )
    await server.start()
    try:
        # ApiVersions v0, empty client id: 14 bytes in, ~130 out. 100,000 of them is 13 MB of
        # responses, several times what the kernel buffers between us and a small receive buffer.
        count = 100_000
        requests = b"".join(struct.pack(">ihhih", 10, 18, 0, i, 0) for i in range(count))
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        sock.setblocking(False)
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.options.port))
        reader, writer = await asyncio.open_connection(sock=sock)
        writer.write(requests)
        sending = asyncio.ensure_future(writer.drain())
        await wait_until(lambda: server.connections, 5, "the connection")
        conn = next(iter(server.connections))
        transport = conn._transport
        await wait_until(lambda: conn._read_paused, 10, "the server to stop reading")
        queued = transport.get_write_buffer_size()
        assert queued < listener_mod.HIGH_WATER_BYTES + 4096, queued  # one response beyond
        # Now read: every answer arrives, in order, and the server reads the rest.
        (size,) = struct.unpack(">i", await reader.readexactly(4))
        data = await asyncio.wait_for(reader.readexactly(size + (count - 1) * (4 + size)), 30)
        data = struct.pack(">i", size) + data
        ids = [struct.unpack_from(">i", data, k * (4 + size) + 4)[0] for k in range(count)]
        assert ids == list(range(count))
        await asyncio.wait_for(sending, 10)
        assert not conn._read_paused
        writer.close()
    finally:
        await server.stop(drain_timeout_s=1)


async def test_a_stop_drops_a_client_that_never_reads_without_calling_it_a_protocol_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The stop waits CLOSE_TIMEOUT_S for queued responses, then drops the connection. That is
    the stop's doing, not the client's: `connections_protocol_errors` must not count it."""
    monkeypatch.setattr(server_mod, "CLOSE_TIMEOUT_S", 0.2)
    server = Server(
        ServerOptions(host="127.0.0.1", port=0), TopicCatalog(()), lambda p: f"{p}-x", None
    )
    await server.start()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    sock.setblocking(False)
    try:
        await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", server.options.port))
        requests = b"".join(struct.pack(">ihhih", 10, 18, 0, i, 0) for i in range(100_000))
        _, writer = await asyncio.open_connection(sock=sock)
        writer.write(requests)
        await wait_until(lambda: server.connections, 5, "the connection")
        conn = next(iter(server.connections))
        await wait_until(lambda: conn._read_paused, 10, "the server to stop reading")
        await asyncio.wait_for(server.stop(drain_timeout_s=0), 10)
        assert conn.closed and not server.connections
        assert server.protocol_errors == 0
        writer.close()
    finally:
        sock.close()


async def test_port_0_on_a_name_with_two_addresses_binds_one_port_on_both() -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6")
    try:
        probe = socket.socket(socket.AF_INET6)
        probe.bind(("::1", 0))
        probe.close()
    except OSError:
        pytest.skip("::1 cannot be bound here")
    fixture = Fixture()
    fixture.listener = await start_listener(fixture.factory, "", 0)  # every interface: v4 and v6
    try:
        ports = {s.getsockname()[1] for s in fixture.listener.sockets}
        families = {s.family for s in fixture.listener.sockets}
        assert len(ports) == 1 and families == {socket.AF_INET, socket.AF_INET6}
        (port,) = ports
        for host in ("127.0.0.1", "::1"):
            _, writer = await asyncio.open_connection(host, port)
            writer.close()
        await wait_until(lambda: len(fixture.protocols) == 2, 5, "both accepts")
    finally:
        fixture.listener.close()
        for protocol in fixture.protocols:
            protocol.transport.abort()
        await fixture.listener.wait_closed()

"""Hostile input over raw sockets closes only the offending connection; everyone else is served.

Issue 2: "arbitrary bytes, truncated frames, frames over the cap, unknown API keys and versions each
close only the offending connection; the server keeps serving the others (a test proves it)". Kafka
closes a connection whose request header it cannot parse or whose version it does not support
without replying (docs/protocol.md §1.1); ApiVersions alone answers an unknown version, as v0 with
UNSUPPORTED_VERSION (§1.3). The proof of "keeps serving" is a bystander connection opened before
the attack that still gets answers after it, and a real consumer whose membership never moves.
"""

from __future__ import annotations

import asyncio
import random
import socket
import struct
import time

import pytest

from tests.support.realclients import (
    PARTITIONS,
    assert_stable_and_described,
    describe_confluent,
    explain_members,
    wait_until,
)

pytestmark = pytest.mark.clients
MAX_FRAME_BYTES = 65536
API_VERSIONS = 18


def header_v1(api_key: int, version: int, correlation_id: int, client_id: bytes = b"hostile"):
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def api_versions_v0(correlation_id: int) -> bytes:
    return frame(header_v1(API_VERSIONS, 0, correlation_id))


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError(f"closed after {len(buf)} of {n} bytes")
        buf += chunk
    return buf


def read_response(sock: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def assert_api_versions_served(sock: socket.socket, correlation_id: int) -> None:
    sock.sendall(api_versions_v0(correlation_id))
    body = read_response(sock)
    got_correlation, error_code = struct.unpack_from(">ih", body)
    assert got_correlation == correlation_id
    assert error_code == 0


def connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)
    return sock


def wait_closed_without_reply(sock: socket.socket, timeout: float = 10) -> None:
    """The server closes the connection (FIN or RST) and sends nothing first."""
    sock.settimeout(timeout)
    received = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        except TimeoutError as exc:
            raise AssertionError(f"connection still open after {timeout}s") from exc
        if not chunk:
            break
        received += chunk
    else:
        raise AssertionError(f"connection still open after {timeout}s")
    assert received == b"", f"server replied to hostile input: {received[:64]!r}"


def _garbage() -> bytes:
    # Deterministic: a size prefix far over the cap, then noise.
    return b"\x7f\xde\xad\xbe" + random.Random(20).randbytes(2048)


def _in_frame_garbage() -> bytes:
    # A well-sized frame whose header names api key 0xdead (negative) and then noise.
    return frame(b"\xde\xad\xbe\xef" + random.Random(7).randbytes(60))


def _truncated_header() -> bytes:
    # A complete frame that ends inside the request header's client_id string.
    return frame(struct.pack(">hhih", API_VERSIONS, 0, 1, 50) + b"short")


def _truncated_body() -> bytes:
    # JoinGroup v5 (non-flexible): a full header, then a body cut off inside the group id.
    return frame(header_v1(11, 5, 2) + struct.pack(">h", 40) + b"grp")


def _flexible_truncated() -> bytes:
    # ApiVersions v3 (request header v2): the tagged-field count promises a field that is not there.
    return frame(header_v1(API_VERSIONS, 3, 3) + b"\x01")


def _over_cap() -> bytes:
    return struct.pack(">i", MAX_FRAME_BYTES + 1)  # the size alone: refused before the body


def _negative_size() -> bytes:
    return struct.pack(">i", -5) + b"\x00" * 8


def _unknown_api_key() -> bytes:
    return frame(header_v1(9999, 0, 4))


def _unsupported_version() -> bytes:
    return frame(header_v1(11, 99, 5) + b"\x00" * 16)  # JoinGroup v99


def _removed_header_v0() -> bytes:
    # Request header v0 (no client_id) for Heartbeat v0: its bytes parse as a wrong v1 header.
    return frame(struct.pack(">hhi", 12, 0, 6))


ATTACKS = {
    "arbitrary-bytes": _garbage,
    "garbage-in-frame": _in_frame_garbage,
    "truncated-header": _truncated_header,
    "truncated-body": _truncated_body,
    "truncated-tagged-fields": _flexible_truncated,
    "over-cap": _over_cap,
    "negative-size": _negative_size,
    "unknown-api-key": _unknown_api_key,
    "unsupported-version": _unsupported_version,
    "header-v0": _removed_header_v0,
}


@pytest.fixture
def hostile_server(server):
    return server(topics={"orders": PARTITIONS}, max_frame_bytes=MAX_FRAME_BYTES)


@pytest.mark.parametrize("attack", list(ATTACKS))
def test_hostile_input_closes_only_that_connection(hostile_server, attack):
    port = hostile_server.port
    bystander = connect(port)
    assert_api_versions_served(bystander, 100)
    offender = connect(port)
    offender.sendall(ATTACKS[attack]())
    try:
        wait_closed_without_reply(offender)
    except AssertionError as exc:
        raise AssertionError(f"{attack}: {exc}\n{hostile_server.log_tail(20)}") from exc
    assert hostile_server.alive(), hostile_server.log_tail()
    assert_api_versions_served(bystander, 101)
    with connect(port) as fresh:
        assert_api_versions_served(fresh, 102)
    bystander.close()
    offender.close()


def test_truncated_stream_then_eof_closes_only_that_connection(hostile_server):
    """A frame that never completes (the peer half-closes mid-frame) is dropped at EOF."""
    port = hostile_server.port
    bystander = connect(port)
    offender = connect(port)
    offender.sendall(struct.pack(">i", 100) + b"\x00\x12\x00\x00")
    assert_api_versions_served(bystander, 200)  # a pending partial frame blocks no one
    offender.shutdown(socket.SHUT_WR)
    wait_closed_without_reply(offender)
    assert hostile_server.alive()
    assert_api_versions_served(bystander, 201)


def test_api_versions_with_unknown_version_is_answered_as_v0(hostile_server):
    with connect(hostile_server.port) as sock:
        sock.sendall(frame(header_v1(API_VERSIONS, 99, 300)))
        body = read_response(sock)
        correlation_id, error_code, count = struct.unpack_from(">ihi", body)
        assert correlation_id == 300
        assert error_code == 35  # UNSUPPORTED_VERSION
        entries = [struct.unpack_from(">hhh", body, 10 + 6 * i) for i in range(count)]
        assert any(key == API_VERSIONS and low == 0 for key, low, _high in entries), entries
        assert_api_versions_served(sock, 301)  # and the connection stays usable


async def test_real_consumer_undisturbed_by_hostile_connections(hostile_server, members):
    """A live group member keeps its membership and partitions through every attack."""
    broker = hostile_server
    consumer = await members("kafka-python", "kp-bystander", bootstrap=broker.bootstrap,
                             group="hostile", topic="orders", session_timeout_ms=6000)
    await assert_stable_and_described(broker, "hostile", [consumer])
    t0 = time.monotonic()
    member_id, owned = consumer.member_id, consumer.owned

    def attack_all() -> None:
        for name, make in ATTACKS.items():
            offender = connect(broker.port)
            offender.sendall(make())
            try:
                wait_closed_without_reply(offender)
            except AssertionError as exc:
                raise AssertionError(f"{name}: {exc}") from exc
            finally:
                offender.close()

    await asyncio.to_thread(attack_all)
    # Past one full session timeout: had the server stalled or dropped the member, it would show.
    deadline = time.monotonic() + 7.0

    def undisturbed():
        assert consumer.running(), consumer.log_tail()
        assert not consumer.events_since(t0), consumer.events_since(t0)
        return time.monotonic() >= deadline

    await wait_until(undisturbed, 10, "one session timeout to pass",
                     explain=lambda: explain_members([consumer], broker))
    view = await asyncio.to_thread(describe_confluent, broker.bootstrap, "hostile")
    assert view.state == "STABLE"
    assert view.members == {member_id: owned}

"""Issue 3 scope 5, on the wire: while a server replays a large log, FindCoordinator answers
(naming this server) and group APIs answer COORDINATOR_LOAD_IN_PROGRESS (14), which clients
retry; once loaded, the same OffsetFetch returns the stored offsets (docs/protocol.md §12.3).

The log (200,000 offset commits) is written directly in the on-disk format, then a Server with a
DiskJournal starts on it; probes run on the same loop while it loads (the load yields between
batches so the server keeps answering).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TypeVar

from coordinator.cli import new_member_id
from coordinator.core.record_codec import encode_record
from coordinator.core.records import OffsetCommitKey, OffsetCommitValue, Record
from coordinator.core.topic_watch import topic_record
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.serve.journal import DiskJournal
from coordinator.serve.server import Server, ServerOptions
from storage.compaction import segment_name
from storage.disk import DiskLog
from storage.entry import encode_entry
from tests.support import durability_util as du
from tests.support.realclients import free_port
from tests.support.sidecar_util import RawClient, kio

TOPIC = "big"
TOPIC_ID = uuid.uuid5(uuid.NAMESPACE_DNS, TOPIC)
PARTITIONS = 100
GROUPS = 2_000  # x PARTITIONS offsets
FIND_COORDINATOR = 10
C = TypeVar("C", du.RawConn, RawClient)


def write_log(path: Path, last: Record | None = None) -> None:
    """Two segments: with more than one, the log starts with a next offset above 0 before its
    tail is read, which once left replies during the load waiting for a flush that never came.
    `last`: one more record after the offsets, the last one the load replays."""
    path.mkdir()
    ts = 1_700_000_000_000
    n = 0
    for first, end in ((0, GROUPS // 2), (GROUPS // 2, GROUPS)):
        with (path / segment_name(n)).open("wb") as out:
            for g in range(first, end):
                out.write(b"".join(
                    encode_entry(n + p, ts, *encode_record(Record(
                        OffsetCommitKey(f"g{g}", TOPIC, p),
                        OffsetCommitValue(g * 1000 + p, -1, "", ts, None))))
                    for p in range(PARTITIONS)
                ))  # fmt: skip
                n += PARTITIONS
            if last is not None and end == GROUPS:
                out.write(encode_entry(n, ts, *encode_record(last)))


def find_coordinator_v1(group: str) -> bytes:
    raw = group.encode()
    return struct.pack(">h", len(raw)) + raw + struct.pack(">b", 0)


def decode_find_coordinator_v1(body: bytes) -> tuple[int, int, str, int]:
    """(error, node id, host, port)."""
    _throttle, error = struct.unpack_from(">ih", body)
    pos = 6
    (n,) = struct.unpack_from(">h", body, pos)
    pos += 2 + max(n, 0)  # error_message
    (node,) = struct.unpack_from(">i", body, pos)
    (hlen,) = struct.unpack_from(">h", body, pos + 4)
    host = body[pos + 6 : pos + 6 + hlen].decode()
    (port,) = struct.unpack_from(">i", body, pos + 6 + hlen)
    return error, node, host, port


@contextlib.asynccontextmanager
async def loading(
    tmp_path: Path, connect: Callable[[int], Awaitable[C]], last: Record | None = None
) -> AsyncIterator[tuple[Server, asyncio.Future[None], C]]:
    """A Server starting on write_log's log (TOPIC declared with PARTITIONS), and a connection
    made while it still loads: (server, its start, the connection). Stopped on exit."""
    data = tmp_path / "data"
    write_log(data, last)
    port = free_port()
    log = await DiskLog.open(data)
    catalog = TopicCatalog((TopicInfo(TOPIC, TOPIC_ID, PARTITIONS),))
    server = Server(ServerOptions(host="127.0.0.1", port=port), catalog, new_member_id,
                    journal=DiskJournal(log))  # fmt: skip
    starting = asyncio.ensure_future(server.start())
    try:
        conn = None
        while conn is None and not starting.done():
            try:
                conn = await connect(port)
            except OSError:
                await asyncio.sleep(0.001)
        assert conn is not None, "the server finished loading before it accepted a connection"
        yield server, starting, conn
    finally:
        if not starting.done():
            await starting
        await server.stop()
        await log.close()


async def test_find_coordinator_works_and_group_apis_wait_while_loading(tmp_path: Path) -> None:
    seen_find = seen_loading = 0
    async with loading(tmp_path, lambda port: du.RawConn.open("127.0.0.1", port)) as (
        server, starting, conn,
    ):  # fmt: skip
        port = server.options.port
        try:
            while not starting.done():
                body = await conn.request(FIND_COORDINATOR, 1, find_coordinator_v1("g7"))
                error, _node, host, got_port = decode_find_coordinator_v1(body)
                assert (error, host, got_port) == (0, "127.0.0.1", port)
                fetched = await conn.fetch("g7", TOPIC, [3])
                if starting.done():
                    break  # answered after the load ended: proves nothing either way
                seen_find += 1
                assert fetched[0] == du.COORDINATOR_LOAD_IN_PROGRESS, fetched
                seen_loading += 1
            await starting
            assert seen_find >= 1 and seen_loading >= 1, "no probe landed inside the load"
            error, parts = await conn.fetch("g7", TOPIC, [3, 99])
            assert (error, parts) == (0, {3: (7003, 0), 99: (7099, 0)})
        finally:
            conn.close()
    print(f"{seen_find} FindCoordinator and {seen_loading} OffsetFetch probes answered while "
          f"{GROUPS * PARTITIONS:,} records loaded")  # fmt: skip


async def test_metadata_waits_for_the_log_and_shows_what_it_says(tmp_path: Path) -> None:
    """The topic is declared with 100 partitions and the log, last of all, says an admin grew
    it to 120 (CreatePartitions before a restart). A Metadata sent while the log loads is held
    until it is loaded: it never shows the 100 a client's leader would then assign."""
    grown = topic_record(TOPIC, TopicInfo(TOPIC, TOPIC_ID, 120))
    request = kio(3, 1, "MetadataRequest", topics=(kio(3, 1, "MetadataRequestTopic", name=TOPIC),))
    async with loading(tmp_path, RawClient.connect, last=grown) as (server, starting, client):
        try:
            sent_while_loading = not starting.done()
            response = await client.call(request, timeout=60)
            assert sent_while_loading, "the load ended before the request was sent"
            assert [len(t.partitions) for t in response.topics] == [120], "answered mid-load"
            assert not server.core.loading
            assert [len(t.partitions) for t in (await client.call(request)).topics] == [120]
        finally:
            client.close()

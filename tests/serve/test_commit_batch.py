"""The server's batch of fast-path commits and KIP-848 heartbeats (Server.fast_offset_commit and
fast_consumer_beat -> Runtime.submit_many), over real sockets: many committers or joining
members at once, each answered once and durable, and a batch that fails closes only its own
connections."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from bench import wire
from coordinator.core.coordinator import CoordinatorConfig
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.serve.journal import DiskJournal
from coordinator.serve.server import Server, ServerOptions
from storage.disk import DiskLog
from tests.support.durability_util import RawConn

HOST = "127.0.0.1"
COMMITTERS = 40


@contextlib.asynccontextmanager
async def running(
    tmp_path: Path, config: CoordinatorConfig | None = None
) -> AsyncIterator[tuple[Server, list[RawConn]]]:
    """A server on a disk log, and a list for the test's connections: closed, then the server
    stopped and its log closed, on the way out."""
    ids = itertools.count()
    options = ServerOptions(host=HOST, port=0, coordinator=config or CoordinatorConfig())
    catalog = TopicCatalog((TopicInfo("orders", uuid.uuid4(), 4),))
    disk = await DiskLog.open(tmp_path, policy="always")
    server = Server(options, catalog, lambda p: f"{p}-{next(ids)}", journal=DiskJournal(disk))
    await server.start()
    conns: list[RawConn] = []
    try:
        yield server, conns
    finally:
        for c in conns:
            c.close()
        await server.stop()
        await disk.close()


def _batch_sizes(server: Any) -> list[int]:
    """The sizes of the batches the server hands its core from now on (core.handle_many)."""
    sizes: list[int] = []
    handle_many = server.core.handle_many

    def recording(commands: Any, now_ms: int) -> Any:
        commands = list(commands)
        sizes.append(len(commands))
        return handle_many(commands, now_ms)

    server.core.handle_many = recording
    return sizes


async def test_concurrent_commits_are_batched_answered_once_and_durable(tmp_path: Path) -> None:
    async with running(tmp_path) as (server, conns):
        sizes = _batch_sizes(server)
        conns += [await RawConn.open(HOST, server.options.port) for _ in range(COMMITTERS)]
        for rnd in range(1, 6):
            answers = await asyncio.gather(
                *(c.commit(f"g{k}", "orders", {k % 4: rnd}) for k, c in enumerate(conns))
            )
            assert answers == [{k % 4: 0} for k in range(COMMITTERS)]
        assert sum(sizes) == 5 * COMMITTERS
        assert max(sizes) > 1, sizes  # commits read in one pass went in together
        journal = server.journal
        assert isinstance(journal, DiskJournal)
        assert journal.durable_seq() == journal.last_seq()  # every answered commit is durable
        for k, c in enumerate(conns[:5]):
            error, parts = await c.fetch(f"g{k}", "orders", [k % 4])
            assert (error, parts[k % 4][0]) == (0, 5)


async def test_a_failing_batch_closes_its_connections_and_the_server_goes_on(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as (server, conns):
        handle_many = server.core.handle_many
        broken = [True]

        def failing(commands: Any, now_ms: int) -> Any:
            if broken[0]:
                raise RuntimeError("injected")
            return handle_many(commands, now_ms)

        server.core.handle_many = failing  # type: ignore[method-assign]
        conns += [await RawConn.open(HOST, server.options.port) for _ in range(3)]
        results = await asyncio.gather(
            *(c.commit("g", "orders", {0: 1}) for c in conns), return_exceptions=True
        )
        assert all(isinstance(r, asyncio.IncompleteReadError) for r in results), results
        assert not server._pending  # nothing left waiting for an answer
        broken[0] = False
        conns.append(fresh := await RawConn.open(HOST, server.options.port))
        assert await fresh.commit("g", "orders", {0: 2}) == {0: 0}


async def test_concurrent_consumer_heartbeats_are_batched_answered_once_and_durable(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as (server, conns):
        sizes = _batch_sizes(server)
        conns += [await RawConn.open(HOST, server.options.port) for _ in range(COMMITTERS)]
        join = wire.consumer_group_heartbeat_v0(
            "cg", "", 0, rebalance_timeout_ms=60_000, topics=["orders"], owned=()
        )
        answers = await asyncio.gather(*(c.consumer_beat(join) for c in conns))
        assert [a.error_code for a in answers] == [0] * COMMITTERS
        assert len({a.member_id for a in answers}) == COMMITTERS
        # Each join went in once; one that got no partitions waited for them, its member's
        # follow-up beat going in later in its place (coordinator.serve.beat_hold). The first
        # member got all four at once.
        assert COMMITTERS <= sum(sizes) <= 2 * COMMITTERS - 1, sizes
        assert max(sizes) > 1, sizes  # beats read in one pass went in together
        journal = server.journal
        assert isinstance(journal, DiskJournal)
        assert journal.durable_seq() == journal.last_seq()  # every answered join is durable
        group = server.core.state.consumer.groups["cg"]
        assert sorted(group.members) == sorted(a.member_id for a in answers)


async def test_a_beat_waiting_when_its_session_ran_out_counts_before_the_expiry(
    tmp_path: Path,
) -> None:
    """The loop runs due timers after its poll of the sockets, and the server's batch of what
    that poll read runs from a call_soon: the expiry must come after it (Runtime._on_timer), or
    a member whose heartbeat was already in the socket is fenced by a deadline it met."""
    session_ms = 300
    config = CoordinatorConfig(consumer_session_timeout_ms=session_ms)
    async with running(tmp_path, config) as (server, conns):
        conns.append(conn := await RawConn.open(HOST, server.options.port))
        join = wire.consumer_group_heartbeat_v0(
            "cg", "", 0, rebalance_timeout_ms=60_000, topics=["orders"], owned=()
        )
        joined = await conn.consumer_beat(join)
        assert joined.error_code == 0 and joined.member_id
        beat = wire.consumer_group_heartbeat_v0("cg", joined.member_id, joined.member_epoch)
        conn.correlation += 1
        frame = wire.flexible_frame(wire.CONSUMER_GROUP_HEARTBEAT, 0, beat, conn.correlation)
        conn.writer.write(frame)  # into the kernel now: the transport's buffer is empty
        # Hold the loop past the session's deadline: the next pass finds the beat readable and
        # the session timer due together.
        time.sleep(2 * session_ms / 1000)
        head = await asyncio.wait_for(conn.reader.readexactly(4), 10)
        data = await asyncio.wait_for(conn.reader.readexactly(int.from_bytes(head, "big")), 10)
        answer = wire.decode_consumer_group_heartbeat_v0(data[4:])
        assert answer.error_code == 0, answer  # 25 UNKNOWN_MEMBER_ID: expired first
        assert joined.member_id in server.core.state.consumer.groups["cg"].members


@pytest.fixture(autouse=True)
def _quiet_expected_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level("CRITICAL", logger="groupcoord.server")

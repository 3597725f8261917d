"""Issue 3: "Crash under load" and the disk-fault half of scope item 2.

1. Many concurrent raw-protocol committers (simple commits: generation -1, member id "") record
   every commit the server acknowledged; the server is SIGKILLed at random moments over several
   rounds; after each restart every acknowledged offset is there (and nothing that was never sent).
2. An in-process server over a DiskLog whose write/fsync fails with ENOSPC on demand: commits get
   NOT_COORDINATOR while the disk fails and nothing is acknowledged; once the disk heals the server
   recovers by itself, commits succeed again, and every acknowledged offset survives a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import uuid
from dataclasses import dataclass, field

from coordinator.cli import new_member_id
from coordinator.core.topics import TopicCatalog, TopicInfo
from coordinator.serve.journal import DiskJournal
from coordinator.serve.server import Server, ServerOptions
from storage.disk import DiskLog
from tests.support import durability_util as du
from tests.support.realclients import wait_until

TOPIC = "load"
PARTITIONS = 4
COMMITTERS = 20
ROUNDS = 5


@dataclass
class Committer:
    """Commits offsets n*10+p to every partition for n = 1, 2, ... (monotonic)."""

    group: str
    n: int = 0
    acked: int = 0  # the last n acknowledged (error 0 on every partition)
    inflight: int = 0  # the last n sent (>= acked)
    acks: int = 0
    errors: dict[int, int] = field(default_factory=dict)

    def offsets(self, n: int) -> dict[int, int]:
        return {p: n * 10 + p for p in range(PARTITIONS)}

    async def run(self, host: str, port: int) -> None:
        """Commit until the connection dies (the server was killed)."""
        try:
            conn = await du.RawConn.open(host, port)
        except OSError:
            return
        try:
            while True:
                n = self.n + 1
                self.inflight = n
                result = await conn.commit(self.group, TOPIC, self.offsets(n))
                self.n = n
                if set(result) == set(range(PARTITIONS)) and not any(result.values()):
                    self.acked = n
                    self.acks += 1
                else:
                    for e in result.values():
                        self.errors[e] = self.errors.get(e, 0) + 1
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            return
        finally:
            conn.close()


async def test_no_acknowledged_commit_is_lost_across_kill9(tmp_path):
    rng = random.Random(int.from_bytes(os.urandom(4)))
    srv = du.ServerProc.create(tmp_path, {TOPIC: PARTITIONS}, fsync="always")
    committers = [Committer(f"crash-{i}") for i in range(COMMITTERS)]
    checked = keys_checked = 0
    try:
        srv.start()
        for rnd in range(ROUNDS):
            await srv.wait_loaded(TOPIC)
            acks_before = sum(c.acks for c in committers)
            tasks = [asyncio.create_task(c.run(srv.host, srv.port)) for c in committers]
            # The kill lands at a random moment: after a random number of acknowledged commits.
            target = acks_before + rng.randint(20, 600)
            await wait_until(lambda t=target: sum(c.acks for c in committers) >= t, 30,
                             f"round {rnd}: {target - acks_before} acknowledged commits",
                             interval=0.001, explain=srv.log_tail)
            srv.kill9()
            done, pending = await asyncio.wait(tasks, timeout=15)
            assert not pending, "committers still running after the kill"
            for t in done:
                t.result()
            srv.start()  # same data dir, same port
            await srv.wait_loaded(TOPIC)
            for c in committers:
                got = await du.fetch_committed(srv.host, srv.port, c.group, TOPIC,
                                               list(range(PARTITIONS)))
                if c.acked == 0 and c.inflight == 0:
                    continue
                for p in range(PARTITIONS):
                    # Monotonic committer: what is stored is the last acknowledged commit, or the
                    # one in flight when the kill came (written, never answered); nothing else.
                    allowed = {c.offsets(c.acked)[p], c.offsets(c.inflight)[p]}
                    if c.acked == 0:
                        allowed = {-1, c.offsets(c.inflight)[p]}
                    assert got[p] in allowed, (
                        f"round {rnd}: {c.group}/{p}: stored {got[p]}, last acknowledged "
                        f"{c.offsets(c.acked)[p] if c.acked else None}, in flight "
                        f"{c.offsets(c.inflight)[p]}\n{srv.log_tail()}")
                    assert c.acked == 0 or got[p] >= c.offsets(c.acked)[p]
                    keys_checked += 1
                # The next round continues from what is stored, so it stays monotonic.
                stored_n = (got[0] // 10) if got[0] >= 0 else 0
                c.n = c.acked = max(c.acked, stored_n)
                c.inflight = c.n
            checked = sum(c.acks for c in committers)
            print(f"round {rnd}: {checked} acknowledged commits so far, all present "
                  f"({keys_checked} (group, partition) checks)")
        errors: dict[int, int] = {}
        for c in committers:
            for e, k in c.errors.items():
                errors[e] = errors.get(e, 0) + k
        assert not errors, f"commits answered with errors: {errors}"
    finally:
        srv.stop()
    print(f"crash under load: {checked} acknowledged commits checked over {ROUNDS} kill -9 "
          f"rounds, {keys_checked} (group, partition) checks, 0 lost")
    assert checked >= ROUNDS * 20
    assert keys_checked == ROUNDS * COMMITTERS * PARTITIONS


# ------------------------------------------------------------------------------ disk fault


class FaultyDisk:
    """write/fsync that fail with ENOSPC while `failing` is set."""

    def __init__(self) -> None:
        self.failing = False
        self.failures = 0

    def write(self, fd: int, data: bytes | memoryview) -> int:
        if self.failing:
            self.failures += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        return os.write(fd, data)

    def fsync(self, fd: int) -> None:
        if self.failing:
            self.failures += 1
            raise OSError(errno.ENOSPC, "No space left on device")
        os.fsync(fd)


async def _start_inprocess(data_dir, disk: FaultyDisk | None = None) -> tuple[Server, DiskLog]:
    injected = {} if disk is None else {"write": disk.write, "fsync": disk.fsync}
    log = await DiskLog.open(data_dir, policy="always", **injected)
    catalog = TopicCatalog((TopicInfo(TOPIC, uuid.uuid5(uuid.NAMESPACE_DNS, TOPIC), PARTITIONS),))
    server = Server(ServerOptions(host="127.0.0.1", port=0), catalog, new_member_id,
                    journal=DiskJournal(log))
    await server.start()
    return server, log


async def _stop_inprocess(server: Server, log: DiskLog) -> None:
    await server.stop()
    await log.close()


async def test_disk_fault_fails_commits_then_recovers(tmp_path):
    disk = FaultyDisk()
    data_dir = tmp_path / "data"
    server, log = await _start_inprocess(data_dir, disk)
    port = server.options.port
    group = "g-fault"
    parts = list(range(PARTITIONS))
    acked: dict[int, int] = {}
    conn = await du.RawConn.open("127.0.0.1", port)
    try:
        for n in (1, 2, 3):
            offsets = {p: n * 100 + p for p in parts}
            assert await conn.commit(group, TOPIC, offsets) == dict.fromkeys(parts, du.NONE)
            acked = offsets
        assert await du.fetch_committed("127.0.0.1", port, group, TOPIC, parts) == acked

        disk.failing = True
        for n in (4, 5, 6):
            result = await conn.commit(group, TOPIC, {p: n * 100 + p for p in parts})
            assert result == dict.fromkeys(parts, du.NOT_COORDINATOR), result
        assert disk.failures >= 1, "the fault never reached the disk"
        assert not log.healthy
        # The recovery loop keeps probing the disk; it stays failed while the fault is on.
        failures = disk.failures
        await wait_until(lambda: disk.failures > failures + 1, 10,
                         "the server to retry the disk")
        result = await conn.commit(group, TOPIC, {p: 700 + p for p in parts})
        assert result == dict.fromkeys(parts, du.NOT_COORDINATOR), result

        disk.failing = False
        # The server recovers by itself (disk.recover() with backoff, then reloads the state).
        await wait_until(lambda: log.healthy, 15, "the log to recover")

        async def commit_ok() -> bool:
            offsets = {p: 800 + p for p in parts}
            return await conn.commit(group, TOPIC, offsets) == dict.fromkeys(parts, du.NONE)

        await wait_until(commit_ok, 15, "a commit to succeed after the disk healed")
        acked = {p: 800 + p for p in parts}
        assert await du.fetch_committed("127.0.0.1", port, group, TOPIC, parts) == acked
        # A new group too: the log takes appends again.
        assert await conn.commit("g-after", TOPIC, {0: 42}) == {0: du.NONE}
    finally:
        conn.close()
        await _stop_inprocess(server, log)

    # Restart on the same directory (no fault injection): every acknowledged offset is there.
    server, log = await _start_inprocess(data_dir)
    try:
        port = server.options.port
        assert log.load_report.damages == []
        got = await wait_until(
            lambda: du.fetch_committed("127.0.0.1", port, group, TOPIC, parts), 10,
            "OffsetFetch after the restart")
        assert got == acked
        assert await du.fetch_committed("127.0.0.1", port, "g-after", TOPIC, [0]) == {0: 42}
    finally:
        await _stop_inprocess(server, log)


async def test_unacknowledged_commit_during_fault_is_not_visible(tmp_path):
    """A commit answered NOT_COORDINATOR must not show up in OffsetFetch once the server has
    recovered: the in-memory state is rebuilt from what is on disk."""
    disk = FaultyDisk()
    server, log = await _start_inprocess(tmp_path / "data", disk)
    port = server.options.port
    conn = await du.RawConn.open("127.0.0.1", port)
    try:
        assert await conn.commit("g", TOPIC, {0: 10}) == {0: du.NONE}
        disk.failing = True
        assert await conn.commit("g", TOPIC, {0: 20}) == {0: du.NOT_COORDINATOR}
        disk.failing = False
        await wait_until(lambda: log.healthy, 15, "the log to recover")
        got = await wait_until(lambda: du.fetch_committed("127.0.0.1", port, "g", TOPIC, [0]),
                               10, "OffsetFetch after recovery")
        assert got == {0: 10}
    finally:
        conn.close()
        with contextlib.suppress(Exception):
            await _stop_inprocess(server, log)

"""Helpers for the durability tests: a groupcoord process that can be SIGKILLed and restarted on
the same data dir and port, a tiny hand-encoded raw-protocol client (OffsetCommit v2 and
OffsetFetch v2, non-flexible: independent of the server's codec), and a committing consumer driver.

The driver (`python -m tests.support.durability_util aiokafka|confluent ARGS`) follows the
contract of tests/clients/common.py (same arguments, same events, so
tests.support.realclients.Member reads it) and also takes JSON commands on stdin, one a line:

    {"cmd": "commit", "offsets": {"<partition>": offset, ...}}  -> {"event": "committed", ...}
                                                                  or {"event": "commit_failed"}
    {"cmd": "report"}   -> {"event": "report", "owned": [...], "committed": {p: o},
                            "position": {p: o}}   (for the partitions it owns)
    close (or EOF)      -> closes the consumer, {"event": "closed"}
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import wire
from tests.support import realclients as rc

# ------------------------------------------------------------------------------------ raw wire

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    rest = struct.pack(">hhi", api_key, version, correlation_id) + _string("durability") + body
    return struct.pack(">i", len(rest)) + rest


def offset_commit_v2(group: str, topic: str, offsets: dict[int, int], generation: int = -1,
                     member_id: str = "") -> bytes:
    parts = b"".join(struct.pack(">iq", p, o) + struct.pack(">h", -1)  # metadata: null
                     for p, o in sorted(offsets.items()))
    return (_string(group) + struct.pack(">i", generation) + _string(member_id)
            + struct.pack(">q", -1)  # retention_time: broker default
            + struct.pack(">i", 1) + _string(topic) + struct.pack(">i", len(offsets)) + parts)


def offset_fetch_v2(group: str, topic: str, partitions: list[int]) -> bytes:
    return (_string(group) + struct.pack(">i", 1) + _string(topic)
            + struct.pack(">i", len(partitions)) + struct.pack(f">{len(partitions)}i", *partitions))


class _Reader:
    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def take(self, fmt: str) -> Any:
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += struct.calcsize(fmt)
        return v

    def string(self) -> str | None:
        n = self.take(">h")
        if n < 0:
            return None
        s = self.buf[self.pos:self.pos + n].decode()
        self.pos += n
        return s


def decode_commit_v2(body: bytes) -> dict[int, int]:
    """partition -> error code (one topic)."""
    r = _Reader(body)
    out: dict[int, int] = {}
    for _ in range(r.take(">i")):
        r.string()
        for _ in range(r.take(">i")):
            p = r.take(">i")
            out[p] = r.take(">h")
    return out


def decode_fetch_v2(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """(top-level error, partition -> (offset, error))."""
    r = _Reader(body)
    out: dict[int, tuple[int, int]] = {}
    for _ in range(r.take(">i")):
        r.string()
        for _ in range(r.take(">i")):
            p = r.take(">i")
            offset = r.take(">q")
            r.string()
            out[p] = (offset, r.take(">h"))
    return r.take(">h"), out


class RawConn:
    """One connection, one request at a time."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation = 0

    @classmethod
    async def open(cls, host: str, port: int, timeout: float = 5) -> RawConn:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        return cls(reader, writer)

    async def request(self, api_key: int, version: int, body: bytes,
                      timeout: float = 10) -> bytes:
        cid = self.send(api_key, version, body)
        await self.writer.drain()
        got, answer = await self.answer(timeout)
        assert got == cid, f"correlation id {got} != {cid}"
        return answer

    def send(self, api_key: int, version: int, body: bytes, *, flexible: bool = False) -> int:
        """Write one request without waiting for its answer (to pipeline); its correlation id.
        `flexible`: request header v2 (KIP-482's APIs, such as ConsumerGroupHeartbeat)."""
        self.correlation += 1
        cid = self.correlation
        frame = (wire.flexible_frame(api_key, version, body, cid) if flexible
                 else _frame(api_key, version, cid, body))  # fmt: skip
        self.writer.write(frame)
        return cid

    async def answer(self, timeout: float = 10) -> tuple[int, bytes]:
        """The next answer on the connection: (correlation id, body)."""
        head = await asyncio.wait_for(self.reader.readexactly(4), timeout)
        (size,) = struct.unpack(">i", head)
        data = await asyncio.wait_for(self.reader.readexactly(size), timeout)
        (got,) = struct.unpack_from(">i", data)
        return got, data[4:]

    async def consumer_beat(self, body: bytes,
                            timeout: float = 10) -> wire.ConsumerHeartbeatResponse:
        """ConsumerGroupHeartbeat v0 (`wire.consumer_group_heartbeat_v0`'s body)."""
        cid = self.send(wire.CONSUMER_GROUP_HEARTBEAT, 0, body, flexible=True)
        got, answer = await self.answer(timeout)
        assert got == cid, f"correlation id {got} != {cid}"
        return wire.decode_consumer_group_heartbeat_v0(answer)

    async def commit(self, group: str, topic: str, offsets: dict[int, int]) -> dict[int, int]:
        body = await self.request(OFFSET_COMMIT, 2, offset_commit_v2(group, topic, offsets))
        return decode_commit_v2(body)

    async def fetch(self, group: str, topic: str,
                    partitions: list[int]) -> tuple[int, dict[int, tuple[int, int]]]:
        body = await self.request(OFFSET_FETCH, 2, offset_fetch_v2(group, topic, partitions))
        return decode_fetch_v2(body)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()


async def fetch_committed(host: str, port: int, group: str, topic: str,
                          partitions: list[int]) -> dict[int, int]:
    """OffsetFetch over a fresh connection; raises on any error (so wait_until retries)."""
    conn = await RawConn.open(host, port)
    try:
        error, parts = await conn.fetch(group, topic, partitions)
    finally:
        conn.close()
    if error != NONE:
        raise RuntimeError(f"OffsetFetch({group}) error {error}")
    bad = {p: e for p, (_, e) in parts.items() if e != NONE}
    if bad:
        raise RuntimeError(f"OffsetFetch({group}) partition errors {bad}")
    return {p: o for p, (o, _) in parts.items()}


# ------------------------------------------------------------------------- restartable server


@dataclass
class ServerProc:
    """`groupcoord serve` on a fixed port and data dir; SIGKILL and restart it at will."""

    tmp: Path
    port: int
    data_dir: Path
    topics: dict[str, int]
    fsync: str = "always"
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @classmethod
    def create(cls, tmp: Path, topics: dict[str, int], fsync: str = "always") -> ServerProc:
        port = rc.free_port()
        data_dir = tmp / f"data-{port}"
        data_dir.mkdir(parents=True, exist_ok=True)
        return cls(tmp, port, data_dir, dict(topics), fsync)

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.tmp / f"groupcoord-{self.port}-{self.starts}.log"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        return f"--- groupcoord log ({self.log_path}) ---\n{rc.tail(self.log_path, lines)}"

    def start(self) -> None:
        assert not self.alive()
        self.starts += 1
        options = {"initial_rebalance_delay_ms": 0, "session_timeout_min_ms": 1000,
                   "session_timeout_max_ms": 300000, "metrics_listen": "", "fsync": self.fsync}
        cmd = rc.groupcoord_command(self.port, self.data_dir, self.topics, options, [])
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, cwd=rc.REPO,
                                         start_new_session=True)
        rc.wait_until_sync(lambda: not self.alive() or rc.can_connect(self.host, self.port), 20,
                           f"groupcoord to accept connections on {self.bootstrap}")
        if not self.alive():
            raise AssertionError(f"groupcoord exited\n{self.log_tail()}")

    async def wait_loaded(self, topic: str, timeout: float = 30) -> None:
        """Until group APIs answer (no COORDINATOR_LOAD_IN_PROGRESS): the log is replayed."""
        await rc.wait_until(
            lambda: fetch_committed(self.host, self.port, "durability-probe", topic, [0]),
            timeout, "the server to finish loading", explain=self.log_tail)

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        self.kill9()


# ------------------------------------------------------------------------- committing members


async def start_committer_member(tmp: Path, kind: str, name: str, *, bootstrap: str, group: str,
                                 topic: str, session_timeout_ms: int = 10000) -> rc.Member:
    args = ["--bootstrap", bootstrap, "--group", group, "--topic", topic, "--assignors", "range",
            "--client-id", name, "--session-timeout-ms", str(session_timeout_ms),
            "--heartbeat-interval-ms", "500", "--rebalance-timeout-ms", "20000"]
    log_path = tmp / f"member-{name}-{time.monotonic_ns()}.log"
    env = dict(os.environ, PYTHONPATH=str(rc.REPO), PYTHONUNBUFFERED="1")
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "tests.support.durability_util", kind, *args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
            cwd=rc.REPO, env=env, start_new_session=True)
    member = rc.Member(kind, name, proc, log_path)
    member.reader = asyncio.create_task(member._read())
    return member


async def send_command(member: rc.Member, cmd: dict[str, Any]) -> None:
    assert member.proc.stdin is not None
    member.proc.stdin.write((json.dumps(cmd) + "\n").encode())
    await member.proc.stdin.drain()


async def ask(member: rc.Member, cmd: dict[str, Any], reply: str, timeout: float = 30,
              accept: tuple[str, ...] = ()) -> dict[str, Any]:
    """Send a command; return the driver's next `reply` event (or one of `accept`)."""
    seen = len(member.events)
    await send_command(member, cmd)

    def answered() -> dict[str, Any] | None:
        assert member.running(), f"{member.name} exited\n{member.log_tail()}"
        for ev in member.events[seen:]:
            if ev["event"] == reply or ev["event"] in accept:
                return ev
        return None

    result: dict[str, Any] = await rc.wait_until(answered, timeout,
                                                 f"{member.name} to answer {cmd}",
                                                 explain=member.log_tail)
    return result


# ------------------------------------------------------------------------------ the drivers


def _commands(loop: asyncio.AbstractEventLoop | None, q: Any) -> None:
    """Read stdin lines into q (a queue.Queue, or an asyncio.Queue when loop is given)."""
    def put(item: Any) -> None:
        if loop is None:
            q.put(item)
        else:
            loop.call_soon_threadsafe(q.put_nowait, item)

    def run() -> None:
        try:
            for raw in sys.stdin:
                line = raw.strip()
                if line == "close":
                    break
                if line:
                    put(json.loads(line))
        finally:
            put({"cmd": "close"})

    threading.Thread(target=run, name="stdin-commands", daemon=True).start()


async def _aiokafka_main(args: Any) -> int:
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.abc import ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

    from tests.clients.common import emit, sorted_ints

    consumer = AIOKafkaConsumer(
        bootstrap_servers=args.bootstrap, group_id=args.group, client_id=args.client_id,
        partition_assignment_strategy=(RangePartitionAssignor,),
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        max_poll_interval_ms=args.rebalance_timeout_ms,
        rebalance_timeout_ms=args.rebalance_timeout_ms, enable_auto_commit=False,
        auto_offset_reset="earliest", retry_backoff_ms=100, metadata_max_age_ms=5000)
    owned: set[int] = set()

    def ids() -> tuple[int | None, str | None]:
        c = getattr(consumer, "_coordinator", None)
        return (None, None) if c is None else (c.generation, c.member_id)

    class Listener(ConsumerRebalanceListener):
        async def on_partitions_revoked(self, revoked):  # type: ignore[override]
            parts = [tp.partition for tp in revoked]
            owned.difference_update(parts)
            emit("revoked", partitions=sorted_ints(parts))

        async def on_partitions_assigned(self, assigned):  # type: ignore[override]
            parts = [tp.partition for tp in assigned]
            owned.update(parts)
            gen, mid = ids()
            emit("assigned", partitions=sorted_ints(owned), added=sorted_ints(parts),
                 generation=gen, member_id=mid)

    consumer.subscribe(topics=[args.topic], listener=Listener())
    await consumer.start()
    emit("started")
    q: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    _commands(asyncio.get_running_loop(), q)
    last: tuple[int | None, str | None] = (None, None)
    while True:
        await consumer.getmany(timeout_ms=100)
        now = ids()
        if now != last:
            last = now
            emit("generation", generation=now[0], member_id=now[1])
        try:
            cmd = q.get_nowait()
        except asyncio.QueueEmpty:
            continue
        if cmd["cmd"] == "close":
            break
        if cmd["cmd"] == "commit":
            offsets = {TopicPartition(args.topic, int(p)): int(o)
                       for p, o in cmd["offsets"].items()}
            try:
                await consumer.commit(offsets)
            except Exception as exc:
                emit("commit_failed", error=repr(exc))
            else:
                emit("committed", offsets=cmd["offsets"])
        elif cmd["cmd"] == "report":
            mine = sorted(owned)
            committed = {}
            position = {}
            try:
                for p in mine:
                    tp = TopicPartition(args.topic, p)
                    committed[str(p)] = await consumer.committed(tp)
                    position[str(p)] = await asyncio.wait_for(consumer.position(tp), 10)
            except Exception as exc:
                emit("report_failed", error=repr(exc))
            else:
                emit("report", owned=mine, committed=committed, position=position)
    await consumer.stop()
    emit("closed")
    return 0


def _confluent_main(args: Any) -> int:
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    from tests.clients.common import emit, sorted_ints

    fetching: dict[int, int] = {}

    def on_stats(raw: str) -> None:
        parts = json.loads(raw).get("topics", {}).get(args.topic, {}).get("partitions", {})
        fetching.clear()
        fetching.update({int(p): v.get("next_offset", -1001) for p, v in parts.items()
                         if int(p) >= 0 and v.get("fetch_state") == "active"})

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": args.group,
        "client.id": args.client_id, "group.protocol": "classic",
        "partition.assignment.strategy": "range",
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": args.heartbeat_interval_ms,
        "max.poll.interval.ms": args.rebalance_timeout_ms, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "topic.metadata.refresh.interval.ms": 5000,
        "retry.backoff.ms": 100, "reconnect.backoff.ms": 100, "log_level": 3,
        # position() stays OFFSET_INVALID until a message is consumed (the topic is always
        # empty here), so the fetch position comes from the statistics: next_offset.
        "statistics.interval.ms": 200, "stats_cb": on_stats})
    owned: set[int] = set()

    def member_id() -> str | None:
        try:
            return consumer.memberid()
        except (KafkaException, RuntimeError):
            return None

    def on_assign(c: Any, partitions: list[Any]) -> None:
        parts = [tp.partition for tp in partitions]
        owned.clear()
        owned.update(parts)
        emit("assigned", partitions=sorted_ints(owned), added=sorted_ints(parts),
             generation=None, member_id=member_id())

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        parts = [tp.partition for tp in partitions]
        owned.difference_update(parts)
        emit("revoked", partitions=sorted_ints(parts))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke,
                       on_lost=on_revoke)
    emit("started")
    q: queue.Queue[dict[str, Any]] = queue.Queue()
    _commands(None, q)
    last: str | None = None
    while True:
        consumer.poll(0.1)
        now = member_id()
        if now != last:
            last = now
            emit("generation", generation=None, member_id=now)
        try:
            cmd = q.get_nowait()
        except queue.Empty:
            continue
        if cmd["cmd"] == "close":
            break
        if cmd["cmd"] == "commit":
            tps = [TopicPartition(args.topic, int(p), int(o)) for p, o in cmd["offsets"].items()]
            try:
                result = consumer.commit(offsets=tps, asynchronous=False)
                errors = [str(tp.error) for tp in result or [] if tp.error is not None]
                if errors:
                    raise RuntimeError(errors)
            except Exception as exc:
                emit("commit_failed", error=repr(exc))
            else:
                emit("committed", offsets=cmd["offsets"])
        elif cmd["cmd"] == "report":
            mine = sorted(owned)
            tps = [TopicPartition(args.topic, p) for p in mine]
            try:
                committed = {str(tp.partition): tp.offset
                             for tp in consumer.committed(tps, timeout=10)}
                position = {str(tp.partition): tp.offset if tp.offset >= 0
                            else fetching.get(tp.partition, tp.offset)
                            for tp in consumer.position(tps)}
            except Exception as exc:
                emit("report_failed", error=repr(exc))
            else:
                emit("report", owned=mine, committed=committed, position=position)
    consumer.close()
    emit("closed")
    return 0


def main() -> int:
    from tests.clients.common import parse_args

    kind = sys.argv.pop(1)
    args = parse_args()
    if kind == "aiokafka":
        return asyncio.run(_aiokafka_main(args))
    if kind == "confluent":
        return _confluent_main(args)
    raise SystemExit(f"unknown kind {kind}")


if __name__ == "__main__":
    sys.exit(main())

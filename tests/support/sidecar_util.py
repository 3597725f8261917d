"""Fixtures for the sidecar tests: tansu, a TCP relay standing for a broker address, `groupcoord
serve --upstream` as a process, consuming drivers, and a raw pipelining Kafka client.

Every process and listener is owned by a `Stack` (the `stack` fixture), which kills it at teardown.
Waits are conditions with deadlines (tests.support.realclients.wait_until). Everything on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import os
import signal
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kio.serial import entity_reader

from coordinator.sidecar import rewrite
from protocol import apis
from tests.support import realclients as rc

REPO = rc.REPO
HOST = "127.0.0.1"


def tansu_binary(peers: Path) -> Path:
    path = peers / "bin" / "tansu"
    if not path.is_file():
        pytest.skip(f"tansu not installed in {peers} (run `make peers`)")
    return path


# ---------------------------------------------------------------------------------------- tansu


@dataclass
class Tansu:
    """A tansu broker (memory storage). `advertised` is the port it puts in Metadata: its own,
    or a relay's in front of it."""

    binary: Path
    port: int
    advertised: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def start(self) -> None:
        url = f"tcp://{HOST}:{self.port}"
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url",
                 f"tcp://{HOST}:{self.advertised}", "--storage-engine", "memory://tansu/"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "RUST_LOG": "warn"}, start_new_session=True)
        rc.wait_until_sync(lambda: self.proc is not None and (self.proc.poll() is not None
                                                              or rc.can_connect(HOST, self.port)),
                           20, f"tansu on {self.port}")
        assert self.proc.poll() is None, rc.tail(self.log_path)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


# ---------------------------------------------------------------------------------------- relay


class Relay:
    """A TCP relay on a fixed port to `target`: the broker's address as the sidecar sees it.
    `stop()` closes the listener and resets every relayed connection (the broker is gone: refused
    connects, dropped links); `start()` again is the broker back at the same address."""

    def __init__(self, port: int, target: int, host: str = HOST) -> None:
        self.port = port
        self.target = target
        self.host = host  # where it listens (another loopback address than the target's: 127/8)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, self.host, self.port,
                                                  reuse_address=True)

    async def _upstream(
        self, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """The connection to `target` for a client's `writer`; None (the client reset) when the
        target refuses."""
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.target)
        except OSError:
            writer.transport.abort()
            return None
        self._writers |= {writer, up_writer}
        return up_reader, up_writer

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if (upstream := await self._upstream(writer)) is None:
            return
        up_reader, up_writer = upstream

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError):
                while data := await src.read(1 << 16):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        # Cancelled when the loop shuts down: end quietly (the stream callback logs otherwise).
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        self._writers -= {writer, up_writer}

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()


class MetadataScript(Relay):
    """A Relay that reads the Kafka frames it carries and lets the test rewrite the broker's
    Metadata answers: a scripted upstream. `script` is a queue of edits (response -> response),
    each applied to one Metadata answer in turn; once it is empty, answers pass unchanged.
    `answers` counts the Metadata answers carried, `scripted` those an edit was applied to.
    Subclasses script other answers by overriding `answer`."""

    def __init__(self, port: int, target: int, host: str = HOST) -> None:
        super().__init__(port, target, host)
        self.script: list[Any] = []
        self.answers = 0
        self.scripted = 0

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if (upstream := await self._upstream(writer)) is None:
            return
        up_reader, up_writer = upstream
        asked: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)

        async def frames(src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                         edit: Any) -> None:
            with contextlib.suppress(OSError, asyncio.CancelledError,
                                     asyncio.IncompleteReadError):
                while True:
                    size = await src.readexactly(4)
                    frame = size + await src.readexactly(struct.unpack(">i", size)[0])
                    if (out := edit(frame)) is not None:
                        dst.write(out)
                        await dst.drain()
            dst.transport.abort()

        def request(frame: bytes) -> bytes:
            api_key, version, correlation_id = struct.unpack_from(">hhi", frame, 4)
            asked[correlation_id] = (api_key, version)
            return frame

        def response(frame: bytes) -> bytes | None:
            correlation_id = rewrite.response_correlation_id(frame)
            api_key, version = asked.pop(correlation_id, (-1, -1))
            return self.answer(api_key, version, correlation_id, frame)

        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(frames(reader, up_writer, request),
                                 frames(up_reader, writer, response))
        self._writers -= {writer, up_writer}

    def answer(self, api_key: int, version: int, correlation_id: int,
               frame: bytes) -> bytes | None:  # fmt: skip
        """The framed answer the client gets instead of `frame`; None: it never gets one."""
        if api_key != rewrite.METADATA:
            return frame
        self.answers += 1
        if not self.script:
            return frame
        self.scripted += 1
        edited = self.script.pop(0)(rewrite.decode_response(api_key, version, frame))
        return rewrite.encode_response(correlation_id, api_key, version, edited)


class LostHandovers(MetadataScript):
    """A relay that loses ConsumerGroupHeartbeat answers handing a member more partitions than
    its previous answer gave it, when that one gave it some (librdkafka then heartbeats with
    no full request), `limit` of them: what a client that timed the answer out and dropped it
    saw (librdkafka waits one heartbeat interval). `lost` counts them."""

    def __init__(self, port: int, target: int, host: str = HOST, limit: int = 1) -> None:
        super().__init__(port, target, host)
        self.limit = limit
        self.lost = 0
        self._given: dict[str, frozenset[tuple[Any, int]]] = {}  # member id -> last assignment

    def answer(self, api_key: int, version: int, correlation_id: int,
               frame: bytes) -> bytes | None:  # fmt: skip
        if api_key != apis.CONSUMER_GROUP_HEARTBEAT:
            return frame
        r = decode(api_key, version, frame)
        if r.error_code != 0 or r.assignment is None:
            return frame
        given = frozenset((tp.topic_id, p) for tp in r.assignment.topic_partitions
                          for p in tp.partitions)
        before = self._given.get(r.member_id)
        if before and given > before and self.lost < self.limit:
            self.lost += 1
            return None
        self._given[r.member_id] = given
        return frame


# -------------------------------------------------------------------------------------- sidecar


def readyz(s: Sidecar) -> tuple[int, str]:
    url = f"http://127.0.0.1:{s.metrics_port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()



@dataclass
class Sidecar:
    port: int
    metrics_port: int
    data_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes]

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def metrics(self) -> str:
        url = f"http://{HOST}:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def upstream(self) -> dict[str, Any]:
        """The sidecar's /upstream document: the upstream as it sees it."""
        url = f"http://{HOST}:{self.metrics_port}/upstream"
        with urllib.request.urlopen(url, timeout=5) as response:
            return dict(json.loads(response.read()))

    def groups(self) -> list[dict[str, Any]]:
        url = f"http://{HOST}:{self.metrics_port}/groups"
        with urllib.request.urlopen(url, timeout=5) as response:
            return list(json.loads(response.read()))

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@dataclass
class Upstream:
    """The cluster a sidecar test runs in front of: a fresh tansu of the test's own, or the run's
    shared Apache Kafka (tests/support/kafka.py). Tests on a shared Kafka keep apart by unique
    names: `name(prefix)` for topics and groups; the Stack gives its sidecars unique state and
    history topics and fleet group."""

    kind: str  # "tansu" | "kafka"
    bootstrap: str
    tansu: Tansu | None = None
    kafka: Any = None  # tests.support.kafka.KafkaCluster

    @property
    def port(self) -> int:
        """The first broker's port (a raw client's way straight to the upstream)."""
        return int(self.bootstrap.split(",")[0].rsplit(":", 1)[1])

    def name(self, prefix: str) -> str:
        from tests.support.kafka import unique

        return unique(prefix) if self.kind == "kafka" else prefix


UPSTREAM_KINDS = ("tansu", "kafka")


@dataclass
class Stack:
    """What a test started; all of it is stopped at teardown."""

    tmp: Path
    peers: Path
    tansus: list[Tansu] = field(default_factory=list)
    relays: list[Relay] = field(default_factory=list)
    sidecars: list[Sidecar] = field(default_factory=list)
    members: list[rc.Member] = field(default_factory=list)
    # One per Stack, so a fleet's members agree and two tests on a shared Kafka never do.
    suffix: str = field(default_factory=lambda: os.urandom(5).hex())

    def fleet_names(self, upstream: str) -> list[str]:
        """The state/history topics and fleet group of this Stack's sidecars in front of a shared
        cluster (one that is not this Stack's own tansu or relay): unique, so that two tests never
        meet on it. Before `extra`, so a test's own --state-topic wins."""
        own = {t.bootstrap for t in self.tansus} | {f"{HOST}:{r.port}" for r in self.relays}
        if upstream.split(",", maxsplit=1)[0] in own:
            return []
        return ["--state-topic", f"__groupcoord_state_{self.suffix}",
                "--history-topic", f"__groupcoord_history_{self.suffix}",
                "--fleet-group", f"groupcoord-fleet-{self.suffix}"]

    def tansu(self, advertised: int | None = None, port: int | None = None) -> Tansu:
        port = port or rc.free_port()
        t = Tansu(tansu_binary(self.peers), port, advertised or port,
                  self.tmp / f"tansu-{port}.log")
        self.tansus.append(t)
        t.start()
        return t

    async def relay(self, target: int, port: int | None = None,
                    kind: type[Relay] = Relay) -> Relay:
        r = kind(port or rc.free_port(), target)
        self.relays.append(r)
        await r.start()
        return r

    def sidecar(self, upstream: str, *extra: str, refresh_ms: int = 200,
                fleet: bool = False, workers: int = 1,
                data_dir: Path | None = None) -> Sidecar:
        """One sidecar; `fleet` keeps the default state on the upstream (a fleet member with a
        fleet listener on a free port), otherwise `--state local`: the single-sidecar tests'
        behaviour (group APIs answer while the upstream is down). `workers` > 1: `serve
        --workers N`, worker i's metrics and fleet listener on the given ports + i. `data_dir`:
        a killed sidecar's, to restart it on its state."""
        port, metrics_port = rc.free_port(), rc.free_ports(workers)
        state = (["--fleet-listen", f"{HOST}:{rc.free_ports(workers)}"] if fleet
                 else ["--state", "local"])
        state += ["--workers", str(workers)] if workers > 1 else []
        data_dir = data_dir or self.tmp / f"sidecar-{port}"
        log_path = self.tmp / f"sidecar-{port}.log"
        cmd = [sys.executable, "-m", "coordinator.cli", "serve", "--listen", f"{HOST}:{port}",
               "--data-dir", str(data_dir), "--upstream", upstream,
               "--metrics-listen", f"{HOST}:{metrics_port}", "--metrics-per-group",
               "--upstream-refresh-ms", str(refresh_ms), "--lag-interval-ms", "300",
               "--initial-rebalance-delay-ms", "0", "--session-timeout-min-ms", "1000",
               *self.fleet_names(upstream), *state, *extra]
        with log_path.open("wb") as log:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                                    stderr=subprocess.STDOUT, cwd=REPO, start_new_session=True)
        s = Sidecar(port, metrics_port, data_dir, log_path, proc)
        self.sidecars.append(s)
        # N workers start N interpreters at once (on a busy machine, 13 s each was seen)
        rc.wait_until_sync(lambda: proc.poll() is not None or rc.can_connect(HOST, port),
                           20 * workers, "the sidecar to listen")
        assert proc.poll() is None, s.log()
        return s

    async def consumer(self, kind: str, name: str, bootstrap: str, group: str, topic: str,
                       heartbeat_interval_ms: int = 500,
                       session_timeout_ms: int = 10_000) -> rc.Member:
        args = ["-m", "tests.clients.sidecar_consumer", "--kind", kind, "--bootstrap", bootstrap,
                "--group", group, "--topic", topic, "--client-id", name,
                "--heartbeat-interval-ms", str(heartbeat_interval_ms),
                "--session-timeout-ms", str(session_timeout_ms)]
        log_path = self.tmp / f"consumer-{name}-{time.monotonic_ns()}.log"
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1")
        with log_path.open("wb") as log:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, *args, stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=log, cwd=REPO, env=env,
                start_new_session=True)
        member = rc.Member(kind, name, proc, log_path)
        member.reader = asyncio.create_task(member._read())
        self.members.append(member)
        return member

    async def close(self) -> None:
        for m in self.members:
            m.kill()
        for m in self.members:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(m.proc.wait(), 10)
            if m.reader is not None:
                m.reader.cancel()
        for s in self.sidecars:
            s.kill()
        for r in self.relays:
            await r.stop()
        for t in self.tansus:
            t.kill()

    def explain(self) -> str:
        parts = [f"--- sidecar log ---\n{rc.tail(s.log_path, 40)}" for s in self.sidecars]
        parts += [m.log_tail(15) for m in self.members]
        parts += [f"{m.name}: {[(e['event'], e.get('partitions')) for e in m.events[-8:]]}"
                  for m in self.members]
        return "\n".join(parts)


@pytest.fixture
async def stack(tmp_path: Path, peers_dir: Path) -> AsyncIterator[Stack]:
    s = Stack(tmp_path, peers_dir)
    try:
        yield s
    finally:
        await s.close()


@pytest.fixture(params=UPSTREAM_KINDS)
def upstream(request: pytest.FixtureRequest, stack: Stack) -> Upstream:
    """Parametrizes a test over both upstreams: tansu (a fresh one) and Apache Kafka 4.4 (the
    run's shared single node). Where they disagree, Kafka is right."""
    if request.param == "kafka":
        cluster = request.getfixturevalue("kafka")
        return Upstream("kafka", cluster.bootstrap, kafka=cluster)
    t = stack.tansu()
    return Upstream("tansu", t.bootstrap, tansu=t)


# ------------------------------------------------------------------------ what consumers said


def records(m: rc.Member) -> list[tuple[int, int, str]]:
    return [(p, o, k) for e in m.events if e["event"] == "records" for p, o, k in e["records"]]


def fetched(m: rc.Member) -> dict[int, int]:
    """The last high watermarks the consumer reported for its assigned partitions."""
    for e in reversed(m.events):
        if e["event"] == "fetched":
            return {int(p): hw for p, hw in e["highwater"].items()}
    return {}


def polls(m: rc.Member) -> int:
    for e in reversed(m.events):
        if e["event"] == "fetched":
            return int(e["polls"])
    return 0


# ------------------------------------------------------------------------------- Kafka helpers


async def create_topic(bootstrap: str, name: str, partitions: int, replication: int = 1,
                       configs: dict[str, str] | None = None) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        topic = NewTopic(name, partitions, replication, topic_configs=configs or {})
        response = await admin.create_topics([topic])
        errors = [e for _, e, *_ in response.topic_errors if e]
        assert not errors, response
    finally:
        await admin.close()


async def create_partitions(bootstrap: str, name: str, total: int) -> None:
    """CreatePartitions (API 37: Kafka has it, tansu 0.6.0 does not): the topic grows to `total`."""
    from aiokafka.admin import AIOKafkaAdminClient, NewPartitions

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        response = await admin.create_partitions({name: NewPartitions(total)})
        errors = [e for _, e, *_ in response.topic_errors if e]
        assert not errors, response
    finally:
        await admin.close()


async def delete_topic(bootstrap: str, name: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()
    try:
        await admin.delete_topics([name])
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, keys: list[str],
                  request_timeout_ms: int = 10000) -> None:
    """Keyed messages (value = key), all acknowledged (acks=all)."""
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5,
                                request_timeout_ms=request_timeout_ms)
    try:
        await producer.start()
        futures = [await producer.send(topic, key=k.encode(), value=k.encode()) for k in keys]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def recreate_topic(bootstrap: str, name: str, partitions: int) -> None:
    """Delete the topic and create it again under its name (a new topic id). Kafka deletes in
    the background: CreateTopics answers TOPIC_ALREADY_EXISTS until it is gone, so it is asked
    again until it succeeds."""
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    await delete_topic(bootstrap, name)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    await admin.start()

    async def created() -> bool:
        response = await admin.create_topics([NewTopic(name, partitions, 1)])
        return not any(e for _, e, *_ in response.topic_errors)

    try:
        await rc.wait_until(created, 30, f"{name} to be created again", interval=0.2)
    finally:
        await admin.close()


def upstream_groups(bootstrap: str) -> list[str]:
    """The groups the broker itself coordinates (ListGroups straight to it)."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
    try:
        return [g["group_id"] for g in admin.list_groups()]
    finally:
        admin.close()


# ---------------------------------------------------------------------------- raw Kafka client

_KIO_NAMES = {0: "produce", 1: "fetch", 2: "list_offsets", 3: "metadata", 10: "find_coordinator",
              18: "api_versions", 60: "describe_cluster", 77: "share_group_describe",
              78: "share_fetch", 79: "share_acknowledge", 76: "share_group_heartbeat",
              32: "describe_configs", 44: "incremental_alter_configs",
              90: "describe_share_group_offsets", 91: "alter_share_group_offsets",
              92: "delete_share_group_offsets"}


def _kio_module(api_key: int, version: int, kind: str) -> Any:
    from protocol import apis

    name = apis.APIS[api_key].name if api_key in apis.APIS else _KIO_NAMES[api_key]
    return importlib.import_module(f"kio.schema.{name}.v{version}.{kind}")


def offset_fetch_request(group: str, topic: str, partitions: int) -> Any:
    """OffsetFetch v7 of partitions 0..n-1 of one group's topic."""
    return kio(9, 7, "OffsetFetchRequest", group_id=group, require_stable=False, topics=(
        kio(9, 7, "OffsetFetchRequestTopic", name=topic,
            partition_indexes=tuple(range(partitions))),))


async def offset_fetch(port: int, group: str, topic: str, partitions: int) -> Any:
    """`offset_fetch_request` asked of `port`: the response."""
    client = await RawClient.connect(port)
    try:
        return await client.call(offset_fetch_request(group, topic, partitions))
    finally:
        client.close()


def commit_request(group: str, topic: str, offsets: dict[int, int]) -> Any:
    """OffsetCommit v8 as an admin tool sends it (no member, generation -1)."""
    return kio(8, 8, "OffsetCommitRequest", group_id=group, generation_id_or_member_epoch=-1,
               member_id="", group_instance_id=None, topics=(
                   kio(8, 8, "OffsetCommitRequestTopic", name=topic, partitions=tuple(
                       kio(8, 8, "OffsetCommitRequestPartition", partition_index=p,
                           committed_offset=o, committed_leader_epoch=-1, committed_metadata="")
                       for p, o in offsets.items())),))


async def commit(port: int, group: str, topic: str, offsets: dict[int, int]) -> int:
    """`commit_request` via `port`: the error code."""
    client = await RawClient.connect(port)
    try:
        response = await client.call(commit_request(group, topic, offsets))
    finally:
        client.close()
    codes = {p.error_code for t in response.topics for p in t.partitions}
    return max(codes, key=abs)


async def fetch(port: int, group: str, topic: str, partitions: int) -> dict[int, int] | int:
    """The group's committed offsets via `port`, or the error code."""
    response = await offset_fetch(port, group, topic, partitions)
    if response.error_code:
        return int(response.error_code)
    return {p.partition_index: p.committed_offset for p in response.topics[0].partitions}


def kio(api_key: int, version: int, cls_name: str, /, **fields: Any) -> Any:
    """A kio request entity (or nested entity) by class name: kio(3, 12, 'MetadataRequest', ...)."""
    return getattr(_kio_module(api_key, version, "request"), cls_name)(**fields)


def metadata(topics: list[str] | None = None) -> object:
    """A Metadata v12 request: `topics` by name, or None for every topic."""
    wanted = None if topics is None else tuple(
        kio(3, 12, "MetadataRequestTopic", topic_id=None, name=t) for t in topics)
    return kio(3, 12, "MetadataRequest", topics=wanted, allow_auto_topic_creation=False,
               include_topic_authorized_operations=False)


def decode(api_key: int, version: int, frame: bytes) -> Any:
    """A framed response -> its kio response entity."""
    module = _kio_module(api_key, version, "response")
    cls = next(c for n, c in vars(module).items()
               if n.endswith("Response") and getattr(c, "__module__", "") == module.__name__
               and getattr(getattr(c, "__type__", None), "name", "") == "response")
    offset = 8
    if api_key != 18 and cls.__flexible__:
        offset = 9  # an empty tagged-field section in response header v1
    value, _ = entity_reader(cls)(frame, offset)
    return value


class RawClient:
    """Requests written back to back (pipelined); responses read in order, each with a deadline."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._next = 1

    @classmethod
    async def connect(cls, port: int) -> RawClient:
        reader, writer = await asyncio.open_connection(HOST, port)
        return cls(reader, writer)

    def frame(self, entity: Any) -> tuple[int, bytes]:
        correlation_id, self._next = self._next, self._next + 1
        return correlation_id, rewrite.encode_request(entity, correlation_id, "raw-test")

    async def send(self, *entities: Any) -> list[int]:
        ids, frames = [], []
        for entity in entities:
            correlation_id, frame = self.frame(entity)
            ids.append(correlation_id)
            frames.append(frame)
        self.writer.write(b"".join(frames))  # one write: every request in flight at once
        await self.writer.drain()
        return ids

    async def receive(self, timeout: float = 10) -> bytes:
        """One framed response; raises ConnectionError when the connection closes."""
        async def read() -> bytes:
            size = await self.reader.readexactly(4)
            return size + await self.reader.readexactly(struct.unpack(">i", size)[0])

        try:
            # asyncio.timeout, not wait_for: 3.11's wait_for drops a cancellation that races
            # the read's completion, and a cancelled caller then loops on (a hung test).
            async with asyncio.timeout(timeout):
                return await read()
        except asyncio.IncompleteReadError as exc:
            raise ConnectionError("closed by the server") from exc

    async def call(self, entity: Any, timeout: float = 10) -> Any:
        await self.send(entity)
        cls = type(entity)
        return decode(cls.__api_key__, cls.__version__, await self.receive(timeout))

    def close(self) -> None:
        self.writer.transport.abort()


def record_batch(keys: list[str]) -> bytes:
    """A v2 record batch (aiokafka's builder: it computes the CRC-32C)."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                        producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                        batch_size=1 << 26)
    now = int(time.time() * 1000)
    for i, key in enumerate(keys):
        builder.append(i, timestamp=now, key=key.encode(), value=key.encode(), headers=[])
    return bytes(builder.build())


def produce_request(topic: str, partition: int, keys: list[str], acks: int = 1) -> Any:
    import datetime

    data = kio(0, 7, "PartitionProduceData", index=partition, records=record_batch(keys))
    topic_data = kio(0, 7, "TopicProduceData", name=topic, partition_data=(data,))
    return kio(0, 7, "ProduceRequest", transactional_id=None, acks=acks,
               timeout=datetime.timedelta(seconds=10), topic_data=(topic_data,))


"""Helpers for the real-client tests: waiting on conditions, running brokers and consumer drivers.

Rules they keep: every wait is a condition with a deadline (`wait_until`), never a bare sleep; every
process started here is killed by the fixture that owns it; a failure message carries what was last
observed and the tail of the process logs, so a red test says why without a rerun.
(tests/support/fakeclock.py is the unit tests' fake-clock harness; this module is the real-socket
side.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.peers import kafkajs_modules

REPO = Path(__file__).resolve().parents[2]
DEFAULT_PEERS = REPO / ".cache" / "peers"
PARTITIONS = 12
KINDS = ("aiokafka", "kafka-python", "confluent", "java")
# Not in KINDS: kafkajs' only assignor is "RoundRobinAssigner" and it has no static membership, so
# its groups are kafkajs-only (tests/clients/test_clients_kafkajs.py); start_member(kind="kafkajs")
# works.
KAFKAJS_DRIVER = Path(__file__).resolve().parents[1] / "clients" / "kafkajs_driver.js"
PY_DRIVERS = {
    "aiokafka": "tests.clients.aiokafka_driver",
    "kafka-python": "tests.clients.kafka_python_driver",
    "confluent": "tests.clients.confluent_driver",
}


class Timeout(AssertionError):
    pass


def _describe(last: object) -> str:
    text = repr(last)
    return text if len(text) < 2000 else text[:2000] + "..."


async def wait_until(
    predicate: Callable[[], Any | Awaitable[Any]],
    timeout: float,
    what: str,
    interval: float = 0.05,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Poll predicate (sync or async) until it returns a truthy value; fail after timeout seconds.

    An AssertionError raised by the predicate fails at once (it states a violated invariant);
    other exceptions count as "not yet" and are reported if the deadline passes.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = predicate()
            if asyncio.iscoroutine(result):
                result = await result
            last = result
            if result:
                return result
        except AssertionError:
            raise
        except Exception as exc:
            last = exc
        if time.monotonic() >= deadline:
            extra = f"\n{explain()}" if explain else ""
            raise Timeout(f"timed out after {timeout}s waiting for {what}; last: {_describe(last)}"
                          f"{extra}")
        await asyncio.sleep(interval)


def wait_until_sync(predicate: Callable[[], Any], timeout: float, what: str,
                    interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:
            last = exc
        if time.monotonic() >= deadline:
            raise Timeout(f"timed out after {timeout}s waiting for {what}; last: {_describe(last)}")
        time.sleep(interval)


# Ports for servers a test starts later are handed out in order, never picked by the kernel and
# released: a released port-0 bind lies in Linux's ephemeral range (32768-60999 by default), where
# the kernel soon gave it again to an outgoing connection of the many clients a test runs or to
# another released bind; the server then failed with "address already in use" (`--metrics-listen`,
# `--fleet-listen`, in loaded -n 2 runs). Drawing them at random below that range was no better:
# two picks waiting to be bound met. So each xdist worker walks its own slice of 10000-32767 in
# order, from a point its pid chooses (a run beside this one starts elsewhere): no two picks of a
# run meet until a slice wraps, and each is still bind-checked.
class _Ports:
    LOW, HIGH = 10_000, 32_768

    def __init__(self) -> None:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:]
        count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT") or 1), 1)
        index = int(worker) % count if worker.isdigit() else 0
        width = (self.HIGH - self.LOW) // count
        self.range = range(self.LOW + index * width, self.LOW + (index + 1) * width)
        self.cursor = os.getpid() % width
        self.lock = threading.Lock()

    def take(self, n: int) -> int:
        with self.lock:
            for _ in range(len(self.range)):
                if self.cursor + n > len(self.range):
                    self.cursor = 0
                first = self.range[self.cursor]
                self.cursor += n
                try:
                    with contextlib.ExitStack() as stack:
                        for i in range(n):
                            s = stack.enter_context(socket.socket(socket.AF_INET,
                                                                  socket.SOCK_STREAM))
                            s.bind(("127.0.0.1", first + i))
                    return first
                except OSError:
                    continue
        raise RuntimeError(f"no {n} consecutive free ports in {self.range}")


_ports = _Ports()


def free_port() -> int:
    return _ports.take(1)


def free_ports(n: int) -> int:
    """The first of n consecutive free ports (`serve --workers N` listens on port + i)."""
    return _ports.take(n)


def can_connect(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return f"<{path} unreadable>"
    return "\n".join(text[-lines:])


# --------------------------------------------------------------------------------------- brokers


@dataclass
class Broker:
    """A broker process under test: groupcoord (default) or tansu (GROUPCOORD_TEST_BROKER=tansu)."""

    kind: str
    host: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    data_dir: Path
    topics: dict[str, int]

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        return f"--- {self.kind} log ({self.log_path}) ---\n{tail(self.log_path, lines)}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


def groupcoord_command(port: int, data_dir: Path, topics: dict[str, int], options: dict[str, Any],
                       extra: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "coordinator.cli", "serve",
           "--listen", f"127.0.0.1:{port}", "--data-dir", str(data_dir)]
    for name, partitions in topics.items():
        cmd += ["--topic", f"{name}:{partitions}"]
    for key, value in options.items():
        if value is not None:
            cmd += [f"--{key.replace('_', '-')}", str(value)]
    return cmd + extra


LOADED = re.compile(r"loaded \d+ records in ")  # coordinator/serve/server.py, once replayed


def start_broker(tmp: Path, peers: Path, topics: dict[str, int], options: dict[str, Any],
                 extra: list[str]) -> Broker:
    kind = os.environ.get("GROUPCOORD_TEST_BROKER", "groupcoord")
    port = free_port()
    data_dir = tmp / f"data-{port}"
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = tmp / f"{kind}-{port}.log"
    url = f"tcp://127.0.0.1:{port}"
    if kind == "tansu":
        cmd = [str(peers / "bin" / "tansu"), "broker", "--listener-url", url,
               "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]
    else:
        # GROUPCOORD_TEST_SERVER_ARGS (e.g. "--log-level DEBUG") is appended, for diagnosis.
        extra = [*extra, *shlex.split(os.environ.get("GROUPCOORD_TEST_SERVER_ARGS", ""))]
        cmd = groupcoord_command(port, data_dir, topics, options, extra)
    with log_path.open("wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=REPO, start_new_session=True)
    broker = Broker(kind, "127.0.0.1", port, proc, log_path, data_dir, dict(topics))
    try:
        wait_until_sync(lambda: not broker.alive() or can_connect("127.0.0.1", port), 20,
                        f"{kind} to accept connections on 127.0.0.1:{port}")
        if not broker.alive():
            raise AssertionError(f"{kind} exited with {proc.returncode}\n{broker.log_tail()}")
        if kind == "groupcoord":
            wait_log_loaded(broker.alive, log_path, port)
        if kind == "tansu":
            for name, partitions in topics.items():
                subprocess.run([str(peers / "bin" / "tansu"), "topic", "create", name,
                                "--partitions", str(partitions), "--broker", url],
                               check=True, capture_output=True, timeout=30)
    except BaseException:
        broker.stop()
        raise
    return broker


def wait_log_loaded(alive: Callable[[], bool], log_path: Path, port: int) -> None:
    """groupcoord listens before its log is replayed, and answers the group APIs
    COORDINATOR_LOAD_IN_PROGRESS meanwhile (real clients retry; a raw request would not): on a
    loaded machine that lasts long enough for a test's first request. Wait for the log line."""

    def loaded() -> bool:
        return not alive() or bool(LOADED.search(log_path.read_text("utf-8", "replace")))

    wait_until_sync(loaded, 30, f"groupcoord on 127.0.0.1:{port} to load its log")


# --------------------------------------------------------------------------------------- members


@dataclass
class Member:
    """One consumer driver process and what it has said so far (tests/clients/common.py)."""

    kind: str
    name: str
    proc: asyncio.subprocess.Process
    log_path: Path
    events: list[dict[str, Any]] = field(default_factory=list)
    owned: frozenset[int] | None = None
    generation: int | None = None
    member_id: str | None = None
    reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        async for ev in _events(self.proc):
            self.take(ev)

    def take(self, ev: dict[str, Any]) -> None:
        """One event the driver printed (stamped with its arrival time)."""
        self.events.append(ev)
        if ev["event"] == "assigned":
            self.owned = frozenset(ev["partitions"])
            if ev.get("generation") is not None:
                self.generation = ev["generation"]
            if ev.get("member_id"):
                self.member_id = ev["member_id"]
        elif ev["event"] == "revoked" and self.owned is not None:
            # (Python clients call on_partitions_revoked([]) before their first join.)
            self.owned = self.owned - frozenset(ev["partitions"])
        elif ev["event"] == "generation" and ev.get("member_id"):
            self.member_id = ev["member_id"]

    def running(self) -> bool:
        return self.proc.returncode is None

    def events_since(self, t: float) -> list[dict[str, Any]]:
        """Assignment changes (assigned/revoked) received at or after monotonic time t."""
        return [e for e in self.events if e["t"] >= t and e["event"] in ("assigned", "revoked")]

    def log_tail(self, lines: int = 30) -> str:
        return f"--- {self.name} ({self.kind}) stderr ---\n{tail(self.log_path, lines)}"

    async def close(self, timeout: float = 30) -> None:
        """Ask the driver to close its consumer (LeaveGroup for a dynamic member) and wait."""
        assert self.proc.stdin is not None
        with contextlib.suppress(ConnectionError, RuntimeError):
            self.proc.stdin.write(b"close\n")
            await self.proc.stdin.drain()
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError as exc:
            raise AssertionError(f"{self.name} did not close within {timeout}s\n"
                                 f"{self.log_tail()}") from exc
        if self.reader is not None:
            await asyncio.wait_for(self.reader, 5)

    def kill(self) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)


async def _events(proc: asyncio.subprocess.Process) -> AsyncIterator[dict[str, Any]]:
    """The JSON lines a driver prints, each stamped with its arrival time ("t", monotonic)."""
    assert proc.stdout is not None
    async for raw in proc.stdout:
        try:
            ev = json.loads(raw)
        except ValueError:
            continue
        ev["t"] = time.monotonic()
        yield ev


@dataclass
class Swarm:
    """One driver process running many consumers (common.py's `--members N`): `members` are
    their views, one Member each (sharing the process: `running()`, `kill()` and the log are
    the swarm's). Close the swarm, not a view: "close" closes every consumer in it."""

    proc: asyncio.subprocess.Process
    log_path: Path
    members: list[Member]
    reader: asyncio.Task[None] | None = None

    async def _read(self) -> None:
        by_name = {m.name: m for m in self.members}
        async for ev in _events(self.proc):
            member = by_name.get(ev.get("member", ""))
            if member is not None:
                member.take(ev)

    def running(self) -> bool:
        return self.proc.returncode is None

    async def close(self, timeout: float = 60) -> None:
        await Member("swarm", "swarm", self.proc, self.log_path, reader=self.reader).close(timeout)

    def kill(self) -> None:
        self.members[0].kill()


def driver_command(kind: str, peers: Path, args: list[str],
                   java_main: str = "ConsumerDriver") -> list[str]:
    """The command line of a driver; `java_main` picks the Java one (tests/java/*.java)."""
    if kind == "java":
        classes = peers / "java" / "classes"
        lib = peers / "java" / "lib"
        cp = os.pathsep.join([str(classes), *sorted(str(j) for j in lib.glob("*.jar"))])
        # Client-sized JVM: C1 only and the serial GC keep five JVMs from starving 2 cores; a
        # swarm's consumers share one JVM, and its heap.
        heap = "-Xmx512m" if "--members" in args else "-Xmx128m"
        return ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", heap,
                "-cp", cp, java_main, *args]
    if kind == "kafkajs":
        return ["node", str(KAFKAJS_DRIVER), *args]
    return [sys.executable, "-m", PY_DRIVERS[kind], *args]


async def start_member(tmp: Path, peers: Path, kind: str, name: str, **kw: Any) -> Member:
    """Start a consumer driver (tests/clients/common.py); the options as `_start_driver`."""
    proc, log_path = await _start_driver(tmp, peers, kind, name, **kw)
    member = Member(kind, name, proc, log_path)
    member.reader = asyncio.create_task(member._read())
    return member


async def start_swarm(tmp: Path, peers: Path, kind: str, name: str, members: int,
                      **kw: Any) -> Swarm:
    """`members` consumers of one kind in one driver process (confluent and java), named
    `{name}-0` ..; the other options as `start_member`."""
    assert members > 1 and kind in ("confluent", "java"), (kind, members)
    proc, log_path = await _start_driver(tmp, peers, kind, name, members=members, **kw)
    swarm = Swarm(proc, log_path,
                  [Member(kind, f"{name}-{i}", proc, log_path) for i in range(members)])
    swarm.reader = asyncio.create_task(swarm._read())
    return swarm


async def _start_driver(tmp: Path, peers: Path, kind: str, name: str, *, bootstrap: str,
                        group: str, topic: str,
                        assignors: list[str] | tuple[str, ...] = ("range",),
                        instance_id: str | None = None, session_timeout_ms: int = 10000,
                        heartbeat_interval_ms: int = 500,
                        rebalance_timeout_ms: int | None = None,
                        metadata_max_age_ms: int = 5000,
                        security: dict[str, str] | None = None,
                        group_protocol: str = "classic", members: int = 1,
                        ) -> tuple[asyncio.subprocess.Process, Path]:
    """Spawn a consumer driver (tests/clients/common.py). `security`: the driver's --security
    object (protocol, mechanism, username, password, cafile, certfile, keyfile).
    `group_protocol`: "consumer" for KIP-848 (Java and confluent drivers)."""
    if rebalance_timeout_ms is None:
        # librdkafka refuses max.poll.interval.ms below session.timeout.ms.
        rebalance_timeout_ms = max(20000, session_timeout_ms)
    args = ["--bootstrap", bootstrap, "--group", group, "--topic", topic,
            "--assignors", ",".join(assignors), "--client-id", name,
            "--session-timeout-ms", str(session_timeout_ms),
            "--heartbeat-interval-ms", str(heartbeat_interval_ms),
            "--rebalance-timeout-ms", str(rebalance_timeout_ms),
            "--metadata-max-age-ms", str(metadata_max_age_ms)]
    if instance_id is not None:
        args += ["--instance-id", instance_id]
    if security:
        args += ["--security", json.dumps(security)]
    if group_protocol != "classic":
        args += ["--group-protocol", group_protocol]
    if members > 1:
        args += ["--members", str(members)]
    return await _spawn(tmp, name, driver_command(kind, peers, args), peers)


async def spawn_member(tmp: Path, peers: Path, kind: str, name: str, cmd: list[str]) -> Member:
    """Run a driver command line as a Member: stdin a pipe, stdout its JSON events, stderr a log
    file in `tmp`, in a session of its own (so `kill()` takes its whole process group)."""
    proc, log_path = await _spawn(tmp, name, cmd, peers)
    member = Member(kind, name, proc, log_path)
    member.reader = asyncio.create_task(member._read())
    return member


async def _spawn(tmp: Path, name: str, cmd: list[str],
                 peers: Path) -> tuple[asyncio.subprocess.Process, Path]:
    log_path = tmp / f"member-{name}-{time.monotonic_ns()}.log"
    env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1",
               NODE_PATH=str(kafkajs_modules(peers)))
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
            cwd=REPO, env=env, start_new_session=True)
    return proc, log_path


def partition_of(members: list[Member], partitions: int) -> bool:
    """True when the members' owned sets are disjoint and cover 0..partitions-1."""
    owned = [m.owned for m in members]
    if any(o is None for o in owned):
        return False
    union: set[int] = set()
    total = 0
    for o in owned:
        assert o is not None
        union |= o
        total += len(o)
    return total == partitions and union == set(range(partitions))


def explain_members(members: list[Member], broker: Broker | None = None) -> str:
    parts = [f"{m.name}: owned={sorted(m.owned) if m.owned is not None else None} "
             f"gen={m.generation} member_id={m.member_id} alive={m.running()} "
             f"events={[(e['event'], e.get('partitions')) for e in m.events[-6:]]}"
             for m in members]
    tails = [m.log_tail(15) for m in members]
    if broker is not None:
        parts.append(broker.log_tail(40))
    return "\n".join(parts + tails)


def kind_params(kinds: tuple[str, ...] = KINDS) -> list[Any]:
    """pytest params for client kinds; the Java one carries the `java` mark."""
    import pytest

    return [pytest.param(k, marks=pytest.mark.java, id=k) if k == "java" else pytest.param(k, id=k)
            for k in kinds]


def require_kind(request: Any, kind: str) -> None:
    """Skip (with the fixture's reason) when the client kind's peer is not installed."""
    if kind == "java":
        request.getfixturevalue("java_peers")
    elif kind == "kafkajs":
        request.getfixturevalue("kafkajs_peers")


# --------------------------------------------------------------------------------------- admin


@dataclass(frozen=True)
class GroupView:
    """What an admin client's DescribeGroups said: state, protocol and member -> partitions."""

    state: str
    protocol: str | None
    members: dict[str, frozenset[int]]
    client_ids: dict[str, str]


def describe_confluent(bootstrap: str, group: str, timeout: float = 10) -> GroupView:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    desc = admin.describe_consumer_groups([group], request_timeout=timeout)[group].result(timeout)
    members = {m.member_id: frozenset(tp.partition for tp in m.assignment.topic_partitions)
               for m in desc.members}
    client_ids = {m.member_id: m.client_id for m in desc.members}
    state = getattr(desc.state, "name", str(desc.state))
    return GroupView(state.upper(), desc.partition_assignor or None, members, client_ids)


def _assigned_partitions(assignment: Any) -> frozenset[int]:
    """Partitions in a DescribeGroups member assignment as kafka-python 3 hands it back (decoded
    to a dict or an object, or left as bytes when it could not decode it)."""
    if not assignment:
        return frozenset()
    out: set[int] = set()
    if isinstance(assignment, bytes | bytearray):
        buf, pos = bytes(assignment), 2  # int16 version, then [topic string, [int32]]
        (ntopics,) = struct.unpack_from(">i", buf, pos)
        pos += 4
        for _ in range(max(ntopics, 0)):
            (tlen,) = struct.unpack_from(">h", buf, pos)
            pos += 2 + max(tlen, 0)
            (nparts,) = struct.unpack_from(">i", buf, pos)
            pos += 4
            out.update(struct.unpack_from(f">{nparts}i", buf, pos))
            pos += 4 * nparts
        return frozenset(out)
    if isinstance(assignment, dict):
        topics = assignment.get("assigned_partitions") or assignment.get("assignment") or []
        for t in topics:
            out.update(t["partitions"] if isinstance(t, dict) else t[1])
        return frozenset(out)
    return frozenset(tp.partition for tp in assignment.partitions())


def kafka_python_admin(bootstrap: str) -> Any:
    from kafka import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)


def describe_kafka_python(bootstrap: str, group: str) -> GroupView:
    admin = kafka_python_admin(bootstrap)
    try:
        info = admin.describe_groups([group])[group]
    finally:
        admin.close()
    if info.get("error"):
        raise AssertionError(f"kafka-python DescribeGroups({group}): {info['error']}")
    members = {m["member_id"]: _assigned_partitions(m["member_assignment"])
               for m in info["members"]}
    client_ids = {m["member_id"]: m["client_id"] for m in info["members"]}
    state = {"CompletingRebalance": "COMPLETING_REBALANCE",
             "PreparingRebalance": "PREPARING_REBALANCE"}.get(info["group_state"],
                                                             info["group_state"].upper())
    return GroupView(state, info.get("protocol_data") or None, members, client_ids)


class _AnyProtocol(str):
    """Equal to every protocol name: stands in where a broker (tansu) does not report one."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return True


async def assert_stable_and_described(broker: Broker, group: str, ms: list[Member],
                                      timeout: float = 60.0) -> GroupView:
    """Wait until the members partition the topic and DescribeGroups reports the same ownership.

    Returns confluent's view of the group once it is Stable and agrees with every client.
    """
    def split() -> bool:
        for m in ms:
            assert m.running(), f"{m.name} exited with {m.proc.returncode}\n{m.log_tail()}"
        return partition_of(ms, PARTITIONS) and all(m.member_id for m in ms)

    await wait_until(split, timeout,
                     f"{len(ms)} members to split {PARTITIONS} partitions",
                     explain=lambda: explain_members(ms, broker))

    if broker.kind == "tansu":
        # Only for developing the drivers: tansu's DescribeGroups lists no members, so the view is
        # the clients' own (any protocol matches); the tests proper run against groupcoord.
        return GroupView("STABLE", _AnyProtocol(), {str(m.member_id): m.owned or frozenset()
                                                    for m in ms},
                         {str(m.member_id): m.name for m in ms})
    seen: list[object] = []

    async def agrees() -> GroupView | None:
        view = await asyncio.to_thread(describe_confluent, broker.bootstrap, group)
        said = {m.member_id: m.owned for m in ms}
        seen[:] = [view, said]
        ok = view.state == "STABLE" and view.members == said and partition_of(ms, PARTITIONS)
        return view if ok else None

    view: GroupView = await wait_until(
        agrees, 30, "DescribeGroups to agree with the clients", interval=0.3,
        explain=lambda: f"described/said: {seen}\n" + explain_members(ms, broker))
    return view

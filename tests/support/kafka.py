"""Apache Kafka 4.4 in the tests: a KRaft cluster of combined broker+controller nodes on loopback.

`make peers` assembles the broker from Maven Central into PEERS/kafka/lib (tests/support/peers.py);
this module formats and starts it with `java -cp`: `kafka.tools.StorageTool format`, then
`kafka.Kafka server.properties`, one JVM per node. The session fixtures in tests/conftest.py start
one single-node cluster (`kafka`) and one three-node cluster (`kafka3`) at most once per test run,
so each costs its 4-8 s of start-up once; tests share them and keep apart by unique topic and group
names (`unique`).

Invariants:
- every node listens on 127.0.0.1 only; its log (log4j2 at INFO for kafka.*) is kept in the
  cluster's directory and its tail is printed by `explain()` for a failing test;
- a node killed with `kill(i)` is restarted by `start_node(i)` on the same ports and log dirs, so a
  test can kill -9 a broker and bring it back; the session fixture restarts any node a test left
  dead before handing the cluster to the next test (`heal`);
- Kafka is never skipped silently: a machine whose peers lack it fails the fixture with the reason
  (the upstream suites are measured against Kafka, see tests/support/peers.py).
- A cluster made with `security` (`Secured`) has, beside PLAINTEXT (inter-broker traffic and the
  readiness probe), an SSL and a SASL_SSL listener on every node: PEM key and trust stores
  (Kafka 4 reads them as they are), SCRAM-SHA-512 as the SASL mechanism, its users created at
  format time (`StorageTool format --add-scram`). `bootstrap_for("SASL_SSL")` is its address list.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.support import realclients as rc

HOST = "127.0.0.1"
LOG4J = """status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.out.ref = STDOUT
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.server.name = org.apache.kafka.server
logger.server.level = INFO
logger.coord.name = org.apache.kafka.coordinator
logger.coord.level = INFO
"""
# A client-sized JVM per node: C1 only and the serial GC keep three brokers, the tests' own JVM
# clients and groupcoord from starving 2 cores; 512 MiB of heap is ample for test traffic.
JVM = ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
       "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true"]


def kafka_lib(peers: Path) -> Path:
    return peers / "kafka" / "lib"


def classpath(peers: Path) -> str:
    return f"{kafka_lib(peers)}/*"


def installed(peers: Path) -> bool:
    return any(kafka_lib(peers).glob("kafka_2.13-*.jar"))


def run_tool(peers: Path, main_class: str, *args: str, timeout: float = 60) -> str:
    """One of Kafka's own command-line tools (kafka-tools, e.g.
    org.apache.kafka.tools.consumer.group.ConsumerGroupCommand), run to completion: its stdout
    and stderr together."""
    cmd = ["java", *JVM, "-cp", classpath(peers), main_class, *args]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    return done.stdout + done.stderr


def unique(prefix: str) -> str:
    """A topic or group name no other test on the shared cluster uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


SECURED_LISTENERS = ("SSL", "SASL_SSL")
SECURE_USERS = {"alice": "alice-secret"}  # the `kafka_secure` fixture's SCRAM-SHA-512 users


@dataclass(frozen=True)
class Secured:
    """TLS and SCRAM for a cluster's SSL and SASL_SSL listeners: the server certificate and key
    (PEM, for 127.0.0.1; tests.support.tls), the CA clients verify it with, and the SCRAM-SHA-512
    users (name -> password)."""

    ca: Path
    cert: Path
    key: Path
    users: dict[str, str]


@dataclass
class Node:
    node_id: int
    port: int
    controller_port: int
    root: Path
    proc: subprocess.Popen[bytes] | None = None
    secured_ports: dict[str, int] = field(default_factory=dict)  # listener name -> port

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def listeners(self) -> dict[str, int]:
        """Every client listener: name (= security protocol) -> port."""
        return {"PLAINTEXT": self.port, **self.secured_ports}

    @property
    def log_path(self) -> Path:
        return self.root / "server.log"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@dataclass
class KafkaCluster:
    """`size` combined KRaft nodes (each a broker and a controller voter)."""

    peers: Path
    root: Path
    size: int = 1
    overrides: dict[str, str] = field(default_factory=dict)
    security: Secured | None = None
    # The nodes' JVM options, and a command each node's java runs under (the bench passes its
    # server JVM and `taskset -c CORE`: bench/servers.py start_kafka).
    jvm: list[str] = field(default_factory=lambda: list(JVM))
    launcher: list[str] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    cluster_id: str = ""

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def bootstrap_for(self, listener: str) -> str:
        """The address list of one listener: PLAINTEXT, or with `security` SSL or SASL_SSL."""
        return ",".join(f"{HOST}:{n.listeners()[listener]}" for n in self.nodes)

    @property
    def replication(self) -> int:
        return min(3, self.size)

    def _java(self, *args: str, jvm: list[str] | None = None) -> list[str]:
        log4j = self.root / "log4j2.properties"
        return ["java", *(jvm or []), f"-Dlog4j2.configurationFile={log4j}",
                "-cp", classpath(self.peers), *args]

    def _properties(self, node: Node) -> str:
        voters = ",".join(f"{n.node_id}@{HOST}:{n.controller_port}" for n in self.nodes)
        rf = self.replication
        clients = ",".join(f"{name}://{HOST}:{port}" for name, port in node.listeners().items())
        protocols = ",".join(f"{name}:{name}" for name in node.listeners())
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"{clients},CONTROLLER://{HOST}:{node.controller_port}",
            "advertised.listeners": clients,
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": f"{protocols},CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.root / "data"),
            "offsets.topic.replication.factor": str(rf),
            "offsets.topic.num.partitions": "10",
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": str(min(2, rf)),
            "transaction.state.log.num.partitions": "10",
            # A timed-out transaction aborted within a second or two, not the default 10 s.
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": str(min(2, rf)),
            "share.coordinator.state.topic.num.partitions": "5",
            "default.replication.factor": str(rf),
            "min.insync.replicas": "1",
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "group.initial.rebalance.delay.ms": "0",
            "group.consumer.heartbeat.interval.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "500",
            "group.consumer.session.timeout.ms": "10000",
            # Kafka 4.4 batches target assignments (one per 1 s by default) and computes them on a
            # background thread; groupcoord computes one in the heartbeat that needs it, as Kafka
            # did up to 4.1. Off, so a heartbeat's answer is comparable (tests/conformance).
            "group.consumer.assignment.interval.ms": "0",
            "group.consumer.assignor.offload.enable": "false",
            "group.consumer.min.session.timeout.ms": "1000",
            # Classic groups' bounds are group.min/max.session.timeout.ms (Kafka 4.4 has no
            # group.classic.* name for them): the fleet's members join with 4 s, under the 6 s
            # default minimum.
            "group.min.session.timeout.ms": "1000",
            # Share groups (KIP-932): Kafka 4.4 formats a new cluster with share.version=2 (the
            # tools' FeatureCommand describe shows it), and the feature is what enables them
            # (group.coordinator.rebalance.protocols, default classic,consumer,streams, is
            # deprecated for feature versions and need not name share); these only shorten their
            # clock. A group's share.record.lock.duration.ms may go down to 1 s (default floor
            # 15 s), and a member joins within a heartbeat of 1 s rather than 5 s (the
            # group.share.* heartbeat and session bounds default to 5 s and 45 s).
            "group.share.min.record.lock.duration.ms": "1000",
            "group.share.heartbeat.interval.ms": "1000",
            "group.share.min.heartbeat.interval.ms": "500",
            "group.share.session.timeout.ms": "10000",
            "group.share.min.session.timeout.ms": "1000",
            "group.share.assignment.interval.ms": "0",
            "group.share.assignor.offload.enable": "false",
            "log.segment.bytes": str(16 << 20),
            "log.retention.check.interval.ms": "60000",
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "log.cleaner.dedupe.buffer.size": str(8 << 20),
            # Leader moves after a kill -9 within seconds (Kafka: 9 s); not 3 s, which fenced a
            # live broker on a loaded machine (its commits answered COORDINATOR_LOAD_IN_PROGRESS).
            "broker.session.timeout.ms": "6000",
            "broker.heartbeat.interval.ms": "500",
            "controller.quorum.election.timeout.ms": "1000",
            "controller.quorum.fetch.timeout.ms": "2000",
            **self._secured_properties(node),
            **self.overrides,
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _secured_properties(self, node: Node) -> dict[str, str]:
        """TLS with PEM stores (a key store file holding the key and its certificate chain) and
        SCRAM-SHA-512 on the SASL_SSL listener; nothing without `security`."""
        sec = self.security
        if sec is None:
            return {}
        keystore = node.root / "keystore.pem"
        keystore.write_text(sec.key.read_text() + sec.cert.read_text())
        scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
        return {
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(keystore),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(sec.ca),
            "ssl.client.auth": "none",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
        }

    def _scram_users(self) -> list[str]:
        """StorageTool format's --add-scram arguments: the users exist before the first start."""
        users = self.security.users if self.security is not None else {}
        return [arg for name, password in users.items()
                for arg in ("--add-scram", f"SCRAM-SHA-512=[name={name},password={password}]")]

    def format(self) -> None:
        if not installed(self.peers):
            raise AssertionError(f"Apache Kafka is not installed in {kafka_lib(self.peers)}: run "
                                 "`make peers` (it needs mvn and java)")
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "log4j2.properties").write_text(LOG4J)
        secured = SECURED_LISTENERS if self.security is not None else ()
        self.nodes = [Node(i + 1, rc.free_port(), rc.free_port(), self.root / f"node-{i + 1}",
                           secured_ports={name: rc.free_port() for name in secured})
                      for i in range(self.size)]
        self.cluster_id = _random_cluster_id()
        procs = []
        for node in self.nodes:
            node.root.mkdir(parents=True, exist_ok=True)
            (node.root / "server.properties").write_text(self._properties(node))
            procs.append(subprocess.Popen(
                # --cluster-id=ID in one word: a random id may begin with "-" (base64url), which
                # as a separate word the tool's argparse takes for an option (a usage error).
                self._java("kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}",
                           "-c", str(node.root / "server.properties"), "--ignore-formatted",
                           *self._scram_users(),
                           jvm=["-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        for node, proc in zip(self.nodes, procs, strict=True):
            out, _ = proc.communicate(timeout=120)
            if proc.returncode != 0:
                raise AssertionError(f"kafka-storage format of node {node.node_id} failed:\n"
                                     f"{out.decode(errors='replace')}")

    def start_node(self, index: int) -> None:
        node = self.nodes[index]
        assert not node.alive(), f"node {node.node_id} is already running"
        with node.log_path.open("ab") as log:
            node.proc = subprocess.Popen(
                [*self.launcher,
                 *self._java("kafka.Kafka", str(node.root / "server.properties"), jvm=self.jvm)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)

    def start(self, timeout: float = 90) -> KafkaCluster:
        self.format()
        for i in range(self.size):
            self.start_node(i)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 90) -> None:
        """Every live node listens and the cluster's Metadata names all of them; a node that exits
        meanwhile fails at once with the logs."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = [n for n in self.nodes if n.proc is not None and n.proc.poll() is not None]
            if dead:
                raise AssertionError(f"Kafka node {dead[0].node_id} exited "
                                     f"({dead[0].proc.returncode if dead[0].proc else '?'})\n"
                                     f"{self.explain()}")
            if self._ready():
                return
            time.sleep(0.2)  # a polling interval inside a deadline-bounded wait
        raise AssertionError(f"Kafka ({self.size} node(s)) not ready in {timeout} s\n"
                             f"{self.explain()}")

    def _ready(self) -> bool:
        live = [n for n in self.nodes if n.alive()]
        if not all(rc.can_connect(HOST, n.port) for n in live):
            return False
        try:
            return _broker_count(live[0].port) >= len(live)
        except OSError:
            return False

    def kill(self, index: int, sig: int = signal.SIGKILL) -> None:
        node = self.nodes[index]
        if node.proc is not None and node.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.proc.pid, sig)
            if sig == signal.SIGKILL:
                node.proc.wait(30)

    def heal(self) -> None:
        """Restart any node a test left dead, and wait until the cluster is whole again."""
        dead = [i for i, n in enumerate(self.nodes) if not n.alive()]
        for i in dead:
            self.start_node(i)
        if dead:
            self.wait_ready()

    def stop(self) -> None:
        for i in range(len(self.nodes)):
            self.kill(i)

    def explain(self, lines: int = 40) -> str:
        return "\n".join(f"--- Kafka node {n.node_id} ({n.log_path}) ---\n"
                         f"{rc.tail(n.log_path, lines)}" for n in self.nodes)


def _random_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _broker_count(port: int) -> int:
    """Metadata v1 (no topics) straight over a socket: how many brokers the cluster names. Kept
    free of client libraries so the readiness probe cannot hang on a client's own retries."""
    import struct

    body = struct.pack(">hhih", 3, 1, 7, 5) + b"probe" + struct.pack(">i", 0)
    with socket.create_connection((HOST, port), timeout=2) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _read(sock, 4))[0]
        frame = _read(sock, size)
    # correlation id, then the brokers array: count, then (node_id, host, port, rack) each.
    return int(struct.unpack(">i", frame[4:8])[0])


def _read(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data

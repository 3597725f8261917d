"""Start, probe, sample and stop the servers under test (groupcoord, tansu, Apache Kafka) as
subprocesses.

Each server gets a fresh free port on 127.0.0.1 and a fresh temporary directory, is pinned to one
core (the generator takes another), and is ready when a raw ApiVersions v0 round trip succeeds;
every wait has a deadline and a dead process is reported with the tail of its log.
"""

from __future__ import annotations

import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench import wire
from tests.support.kafka import KafkaCluster

REPO = Path(__file__).resolve().parent.parent
HOST = "127.0.0.1"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def peers_dir() -> Path:
    return Path(os.environ.get("GROUPCOORD_PEERS") or REPO / ".cache" / "peers")


def tansu_path() -> Path | None:
    for p in (
        os.environ.get("GROUPCOORD_TANSU"),
        peers_dir() / "bin" / "tansu",
        shutil.which("tansu"),
    ):
        if p and Path(p).is_file() and os.access(p, os.X_OK):
            return Path(p)
    return None


def cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def raise_fd_limit() -> int:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    workdir: Path
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss_kb(self) -> int:
        """VmRSS from /proc/PID/status, in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise RuntimeError("no VmRSS")

    def cpu_s(self) -> float:
        """utime + stime of the whole process (all threads), in seconds."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(self, deadline_s: float = 30.0) -> None:
        deadline = time.monotonic() + deadline_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.stop()  # removes the work directory
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{tail}")
            try:
                probe(self.port)
                return
            except OSError as e:
                last = e
                time.sleep(0.05)
        tail = self.log_tail()
        self.stop()
        raise RuntimeError(f"{self.name} not ready in {deadline_s}s ({last}):\n{tail}")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait(timeout_s)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)  # the server leads its own session (start_new_session)
        except (ProcessLookupError, PermissionError):
            self.proc.send_signal(sig)


def probe(port: int, timeout_s: float = 2.0) -> None:
    """One ApiVersions v0 round trip over a plain socket; raises OSError if the server isn't up."""
    with socket.create_connection((HOST, port), timeout=timeout_s) as s:
        s.sendall(wire.frame(*wire.api_versions_v0(), 7))
        data = b""
        while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4]):
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed during probe")
            data += chunk
        if int.from_bytes(data[4:8]) != 7:
            raise ConnectionError("bad correlation id in probe")


def _spawn(
    name: str,
    argv: list[str],
    core: int | tuple[int, ...] | None,
    env: dict[str, str] | None = None,
) -> Server:
    workdir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-"))
    log = workdir / "server.log"
    port = free_port()
    argv = [a.replace("{port}", str(port)).replace("{dir}", str(workdir / "data")) for a in argv]
    taskset = shutil.which("taskset")
    cpus = (core,) if isinstance(core, int) else core  # a tuple: any of these cores
    if cpus is not None and taskset:
        argv = [
            taskset,
            "-c",
            ",".join(map(str, cpus)),
            *argv,
        ]  # exec's the server: same pid, all threads pinned
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # its own process group: stop() signals the server only
        )
    if cpus is not None and not taskset:
        os.sched_setaffinity(proc.pid, cpus)
    return Server(name, proc, port, workdir, log)


def start_groupcoord(core: int | tuple[int, ...] | None, extra: list[str] | None = None) -> Server:
    argv = [
        sys.executable,
        "-m",
        "coordinator.cli",
        "serve",
        "--listen",
        f"{HOST}:{{port}}",
        "--data-dir",
        "{dir}",
        "--initial-rebalance-delay-ms",
        "0",
        "--session-timeout-min-ms",
        "1000",
        "--session-timeout-max-ms",
        "300000",
        "--metrics-listen",
        f"{HOST}:{free_port()}",
        *(extra or []),
    ]
    server = _spawn("groupcoord", argv, core, {"PYTHONUNBUFFERED": "1"})
    server.wait_ready()
    return server


def start_null(core: int | None) -> Server:
    """The calibration responder (bench/nullserver.py): the generator's ceiling on this machine."""
    argv = [sys.executable, "-m", "bench.nullserver", "{port}", "--seconds", "900"]
    server = _spawn("null", argv, core)
    server.wait_ready()
    return server


def start_tansu(path: Path, core: int | None) -> Server:
    url = f"tcp://{HOST}:{{port}}"
    argv = [
        str(path),
        "broker",
        "--listener-url",
        url,
        "--advertised-listener-url",
        url,
        "--storage-engine",
        "memory://tansu/",
    ]
    server = _spawn("tansu", argv, core, {"RUST_LOG": "warn"})
    server.wait_ready()
    return server


# Apache Kafka as `bin/kafka-server-start.sh` runs it (its KAFKA_HEAP_OPTS and
# KAFKA_JVM_PERFORMANCE_OPTS defaults): the JIT's both tiers, G1, a 1 GiB heap committed up front.
# The tests' KafkaCluster uses a client-sized JVM instead (C1 only, serial GC), not a broker's.
KAFKA_JVM = [
    "-Xmx1G",
    "-Xms1G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-XX:MaxInlineLevel=15",
    "-Djava.awt.headless=true",
]
# Kafka's own defaults where tests/support/kafka.py shrinks them for a test cluster on 2 cores or
# for fast failover (a broker fenced after 3 s without a heartbeat to its controller would, on a
# busy core, drop its partitions mid-measure: its coordinators answer "loading"). As groupcoord is
# run here, the classic protocol's initial rebalance delay stays 0 (the tests' setting).
KAFKA_AS_SHIPPED = {
    "broker.session.timeout.ms": "9000",
    "broker.heartbeat.interval.ms": "2000",
    "group.consumer.session.timeout.ms": "45000",
    "num.network.threads": "3",
    "num.io.threads": "8",
    "background.threads": "10",
    "offsets.topic.num.partitions": "50",
    "log.segment.bytes": str(1 << 30),
    "log.cleaner.dedupe.buffer.size": str(128 << 20),
}


def start_kafka(
    core: int | None, overrides: dict[str, str] | None = None, base: Path | None = None
) -> Server:
    """One KRaft node (broker + controller) from $GROUPCOORD_PEERS/kafka/lib, formatted and
    started by the tests' KafkaCluster, every JVM thread on `core` (under taskset); its directory
    is under `base` (default: the system's temporary directory). Ready when the cluster's Metadata
    names the broker; group APIs need `__consumer_offsets` too (bench/scenario_kafka.py waits)."""
    root = Path(tempfile.mkdtemp(prefix="bench-kafka-", dir=base))
    taskset = shutil.which("taskset")
    cluster = KafkaCluster(
        peers_dir(),
        root,
        1,
        overrides={**KAFKA_AS_SHIPPED, **(overrides or {})},
        jvm=list(KAFKA_JVM),
        launcher=[taskset, "-c", str(core)] if core is not None and taskset else [],
    )
    try:
        cluster.start(timeout=120)
    except BaseException:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    node = cluster.nodes[0]
    assert node.proc is not None
    return Server("kafka", node.proc, node.port, root, node.log_path)

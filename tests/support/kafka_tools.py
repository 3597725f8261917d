"""Kafka's own command-line tools, as the scripts in Kafka's bin/ run them
(kafka-consumer-groups.sh is `ConsumerGroupCommand`, kafka-acls.sh is `AclCommand`), many
commands in one JVM: tests/java/ToolRunner.java, compiled here against the Kafka 4.4 jars in the
peers dir. A JVM per command costs a second or more on a loaded machine; one per test costs it
once. The tools' own log (log4j2, WARN and up) goes to a file in the test's directory.

Fixtures (import them into a test module): `tools`, a runner per test.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from tests.support.kafka import classpath

SOURCE = Path(__file__).resolve().parents[1] / "java" / "ToolRunner.java"
CONSUMER_GROUPS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
ACLS = "org.apache.kafka.tools.AclCommand"
SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"  # kafka-share-groups.sh
LOG4J = """\
rootLogger.level = WARN
rootLogger.appenderRef.file.ref = file
appender.file.type = File
appender.file.name = file
appender.file.fileName = {path}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
"""


@dataclass(frozen=True, slots=True)
class Result:
    returncode: int
    stdout: str
    stderr: str


def compile_runner(peers: Path, out: Path) -> Path:
    """ToolRunner's class directory (javac once per directory)."""
    if not (out / "ToolRunner.class").is_file():
        out.mkdir(parents=True, exist_ok=True)
        subprocess.run(["javac", "-nowarn", "-d", str(out), "-cp", classpath(peers), str(SOURCE)],
                       check=True, capture_output=True, timeout=120)
    return out


class KafkaTools:
    """One ToolRunner JVM: `run(CONSUMER_GROUPS, "--bootstrap-server", b, "--list")`."""

    def __init__(self, peers: Path, classes: Path, tmp: Path) -> None:
        log4j = tmp / "tools-log4j2.properties"
        self.log_path = tmp / "tools.log"
        log4j.write_text(LOG4J.format(path=self.log_path))
        cp = f"{classpath(peers)}:{classes}"
        self._stderr = (tmp / "tools-jvm.err").open("wb")
        self.proc = subprocess.Popen(
            ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m",
             f"-Dlog4j2.configurationFile={log4j}", "-cp", cp, "ToolRunner"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
            start_new_session=True)  # fmt: skip

    def run(self, main_class: str, *args: str) -> Result:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        assert all("\t" not in a and "\n" not in a for a in args), args
        self.proc.stdin.write(("\t".join([main_class, *args]) + "\n").encode())
        self.proc.stdin.flush()
        stdout: IO[bytes] = self.proc.stdout
        header = stdout.readline().decode()
        if not header.startswith("@@ "):
            raise AssertionError(f"ToolRunner died or spoke out of turn: {header!r}")
        code, n_out, n_err = (int(x) for x in header.split()[1:])
        return Result(code, _read(stdout, n_out), _read(stdout, n_err))

    async def arun(self, main_class: str, *args: str) -> Result:
        """`run` off the event loop, so the consumer drivers' output keeps being read."""
        return await asyncio.to_thread(self.run, main_class, *args)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._stderr.close()


def _read(stream: IO[bytes], n: int) -> str:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            raise AssertionError("ToolRunner died mid-answer")
        data += chunk
    return data.decode()


@pytest.fixture(scope="session")
def tool_classes(java_peers: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return compile_runner(java_peers, tmp_path_factory.mktemp("tool-runner"))


@pytest.fixture
def tools(java_peers: Path, tool_classes: Path, tmp_path: Path) -> Iterator[KafkaTools]:
    runner = KafkaTools(java_peers, tool_classes, tmp_path)
    yield runner
    runner.close()

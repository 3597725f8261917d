"""A Spark standalone cluster on 127.0.0.1, started from the installed pyspark (issue 25): one
master and one worker, each a JVM of its own (`java -cp $SPARK_HOME/jars/*`, SPARK_HOME = the
pyspark package), for the audit's cluster test (tests/pipeline/conftest.py) and the bench
(bench/scenario_audit_cluster.py).

Ready means the master lists the worker ALIVE (its /json document), a condition with a deadline.
`stop()` kills both process groups (the worker's executors are its children). The worker runs
executors with this interpreter's Python (the driver's PYSPARK_PYTHON), so they have groupcoord,
aiokafka and pyarrow.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.realclients import free_port

HOST = "127.0.0.1"
DAEMON_HEAP = "-Xmx512m"  # master and worker daemons (Spark's default is 1 GiB each)


class ClusterUnavailable(Exception):
    """No Java or no pyspark: the caller skips."""


def spark_home() -> Path:
    try:
        import pyspark
    except ImportError as exc:
        raise ClusterUnavailable(f"pyspark is not installed ({exc})") from None
    return Path(pyspark.__file__).resolve().parent


def _scala_version(home: Path) -> str:
    for jar in (home / "jars").glob("spark-core_*.jar"):
        return jar.name.split("_", 1)[1].split("-", 1)[0]
    return "2.13"


@dataclass
class StandaloneCluster:
    workdir: Path
    cores: int = 1
    memory: str = "1g"
    port: int = 0
    webui_port: int = 0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def driver_conf(self) -> dict[str, str]:
        """What a driver on this machine needs to be reachable by the executors."""
        return {
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.executor.memory": "512m",
            "spark.executor.cores": str(self.cores),
        }

    def start(self, timeout_s: float = 90) -> None:
        java = shutil.which("java")
        if java is None:
            raise ClusterUnavailable("java is not installed (Spark needs Java 17+)")
        home = spark_home()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port, self.webui_port = free_port(), free_port()
        env = {
            **os.environ,
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": HOST,
            # What bin/load-spark-env.sh exports: without it the worker's launcher looks for a
            # source build's directories and fails every executor ("Cannot find any build
            # directories").
            "SPARK_SCALA_VERSION": _scala_version(home),
            "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable),
        }
        classpath = f"{home / 'jars'}/*"
        self._spawn(
            "master",
            [java, DAEMON_HEAP, "-cp", classpath, "org.apache.spark.deploy.master.Master",
             "--host", HOST, "--port", str(self.port), "--webui-port", str(self.webui_port)],
            env,
        )  # fmt: skip
        self._spawn(
            "worker",
            [java, DAEMON_HEAP, "-cp", classpath, "org.apache.spark.deploy.worker.Worker",
             self.url, "--host", HOST, "--cores", str(self.cores), "--memory", self.memory,
             "--webui-port", str(free_port()), "--work-dir", str(self.workdir / "work")],
            env,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while self.alive_workers() < 1:
            for proc in self.procs:
                if proc.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no worker registered in {timeout_s} s:\n{self.log_tail()}")
            time.sleep(0.2)  # polling the master's state, with the deadline above

    def _spawn(self, name: str, cmd: list[str], env: dict[str, str]) -> None:
        with (self.workdir / f"{name}.log").open("ab") as log:
            self.procs.append(
                subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    cwd=self.workdir,
                    start_new_session=True,
                )
            )

    def state(self) -> dict[str, Any]:
        """The master's /json document (workers, running and completed applications)."""
        url = f"http://{HOST}:{self.webui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return dict(json.loads(response.read()))

    def alive_workers(self) -> int:
        try:
            return int(self.state().get("aliveworkers", 0))
        except (OSError, ValueError):
            return 0

    def completed_apps(self) -> list[dict[str, Any]]:
        return list(self.state().get("completedapps", []))

    def log_tail(self, lines: int = 30) -> str:
        out = []
        for name in ("master", "worker"):
            path = self.workdir / f"{name}.log"
            text = path.read_text(errors="replace").splitlines() if path.exists() else []
            out.append(f"--- {name} ---\n" + "\n".join(text[-lines:]))
        return "\n".join(out)

    def stop(self) -> None:
        for proc in reversed(self.procs):  # the worker first: it takes its executors along
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(15)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(10)
        self.procs.clear()


@contextlib.contextmanager
def standalone_cluster(workdir: Path, cores: int = 1, memory: str = "1g") -> Iterator[Any]:
    cluster = StandaloneCluster(workdir, cores, memory)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def shutdown_spark_gateway() -> None:
    """End the py4j JVM of this process (SparkSession.stop keeps it for a next session), so the
    rest of a test run has the memory."""
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    if gateway is None:
        return
    gateway.shutdown()
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        proc.kill()
        proc.wait(30)
    SparkContext._gateway = None
    SparkContext._jvm = None

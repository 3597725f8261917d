"""Shared fixtures: uvloop for every asyncio test, a broker factory, consumer drivers, peers.

Kept light at import time (no client libraries, no uvloop import until a test needs it) so the pure
unit tests collect fast. The broker under test is `groupcoord serve`; GROUPCOORD_TEST_BROKER=tansu
runs the same client tests against the tansu reference broker instead (its options are ignored).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import shutil
import sys
from collections.abc import AsyncIterator, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.support import realclients


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python's admin client reads its bundled JSON through importlib.resources.open_text.
    config.addinivalue_line(
        "filterwarnings", "ignore:open_text is deprecated:DeprecationWarning:importlib.*"
    )
    from hypothesis import HealthCheck, settings

    # No per-example deadline and no "too slow" health check: with two test workers on a shared
    # 2-core machine an example's wall time measures the machine's load, not the code, and a
    # property test must not fail on it. Loaded here, before any test module is imported, so
    # that a test's own @settings(...) inherits it.
    settings.register_profile("groupcoord", deadline=None,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.load_profile("groupcoord")


# -- parallel runs -------------------------------------------------------------------------------
# `make test` runs the suite on two pytest-xdist workers (`-n 2 --dist loadgroup`): each worker is
# its own pytest session, so the session fixtures below (the Kafka clusters, tool JVMs) start once
# per worker that needs them, and tests on one worker run one after another as before. Tests that
# must not run beside each other (they load the whole machine, or they would start a session
# fixture on both workers for nothing) carry `@pytest.mark.xdist_group(NAME)`: a group runs on one
# worker, in collection order (docs/development.md, "Tests").


# Session fixtures only a few tests use: their tests form one group, so that each starts on one
# worker only (three Kafka JVMs, or a TLS one, are not started twice for a handful of tests).
GROUP_OF_FIXTURE = {"_kafka3_session": "kafka3", "_kafka_secure_session": "kafka-secure"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups (--dist loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        for fixture, group in GROUP_OF_FIXTURE.items():
            if fixture in fixtures and item.get_closest_marker("xdist_group") is None:
                item.add_marker(pytest.mark.xdist_group(group))


def _conformance_counts() -> dict[str, dict[str, int]]:
    """The conformance harness's counts in this process (tests/conformance), if it ran here."""
    harness = sys.modules.get("tests.conformance.harness")
    return {} if harness is None else {"compared": harness.COMPARED, "used": harness.USED}


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A worker hands its conformance counts to the controller (xdist's `workeroutput`)."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output["conformance"] = _conformance_counts()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller adds up each worker's conformance counts for the summary below."""
    counts = getattr(node, "workeroutput", {}).get("conformance")
    if not counts:
        return
    from tests.conformance import harness

    for name, total in (("compared", harness.COMPARED), ("used", harness.USED)):
        for key, n in counts[name].items():
            total[key] = total.get(key, 0) + n


def pytest_terminal_summary(terminalreporter: Any) -> None:
    counts = _conformance_counts()
    if counts.get("compared"):
        compared = counts["compared"]
        terminalreporter.write_line(f"conformance: {sum(compared.values())} answers compared: "
                                    + ", ".join(f"{k}: {v}" for k, v in sorted(compared.items())))
    if counts.get("used"):
        terminalreporter.write_line("intended differences met (id: times): " + ", ".join(
            f"{k}: {v}" for k, v in sorted(counts["used"].items())))


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Any]:
    """Every asyncio test and fixture runs on uvloop (the server's own loop)."""
    import uvloop

    return {"uvloop": uvloop.new_event_loop}


# Every asyncio test body has a deadline: a wait that lacks one fails its test with the await it
# hung in, and the run goes on. (pytest-timeout's signal method cannot interrupt uvloop's poll;
# its thread method, at the larger `timeout` in pyproject.toml, is the backstop for sync code and
# fixtures: it prints every thread's stack and ends the run.)
ASYNC_TEST_DEADLINE_S = 300.0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    func = getattr(item, "obj", None)
    if not (isinstance(item, pytest.Function) and inspect.iscoroutinefunction(func)):
        return (yield)
    assert func is not None
    marker = item.get_closest_marker("deadline")
    seconds = float(marker.args[0]) if marker else ASYNC_TEST_DEADLINE_S

    @functools.wraps(func)
    async def bounded(*args: Any, **kwargs: Any) -> Any:
        deadline = asyncio.timeout(seconds)
        try:
            async with deadline:
                return await func(*args, **kwargs)
        except TimeoutError as exc:
            if deadline.expired():
                pytest.fail(f"the test ran past its {seconds:.0f} s deadline (where it was "
                            f"waiting is in the traceback above)")
            raise exc

    item.obj = bounded
    try:
        return (yield)
    finally:
        item.obj = func


@pytest.fixture(scope="session")
def peers_dir() -> Path:
    return Path(os.environ.get("GROUPCOORD_PEERS", str(realclients.DEFAULT_PEERS))).resolve()


def _running(cluster: Any) -> Iterator[Any]:
    """A session's cluster, started, and stopped at the end of the run."""
    try:
        yield cluster.start()
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def _kafka_session(peers_dir: Path, tmp_path_factory: pytest.TempPathFactory
                   ) -> Iterator[Any]:
    from tests.support.kafka import KafkaCluster

    yield from _running(KafkaCluster(peers_dir, tmp_path_factory.mktemp("kafka1"), size=1))


@pytest.fixture(scope="session")
def _kafka3_session(peers_dir: Path, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[Any]:
    from tests.support.kafka import KafkaCluster

    yield from _running(KafkaCluster(peers_dir, tmp_path_factory.mktemp("kafka3"), size=3))


@pytest.fixture(scope="session")
def _kafka_secure_session(peers_dir: Path, tmp_path_factory: pytest.TempPathFactory
                          ) -> Iterator[Any]:
    from tests.support.kafka import SECURE_USERS, KafkaCluster, Secured
    from tests.support.tls import make_certs

    certs = make_certs(tmp_path_factory.mktemp("kafka-secure-certs"))
    security = Secured(certs.ca, certs.server_cert, certs.server_key, SECURE_USERS)
    yield from _running(KafkaCluster(peers_dir, tmp_path_factory.mktemp("kafka-secure"), size=1,
                                     security=security))


@pytest.fixture
def kafka_secure(_kafka_secure_session: Any) -> Any:
    """Apache Kafka 4.4, one KRaft node with SSL and SASL_SSL (SCRAM-SHA-512, users
    tests.support.kafka.SECURE_USERS) listeners beside PLAINTEXT (tests/support/kafka.py
    `Secured`); started only by the tests that ask for it, shared like `kafka`.
    `.security.ca` verifies it."""
    _kafka_secure_session.heal()
    return _kafka_secure_session


@pytest.fixture
def kafka(_kafka_session: Any) -> Any:
    """Apache Kafka 4.4, one KRaft node, shared by the whole run (tests/support/kafka.py): keep
    apart with unique topic and group names. A node a test killed is restarted first."""
    _kafka_session.heal()
    return _kafka_session


@pytest.fixture
def kafka3(_kafka3_session: Any) -> Any:
    """Apache Kafka 4.4, three KRaft nodes (each broker and controller), shared like `kafka`."""
    _kafka3_session.heal()
    return _kafka3_session


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, Any, Any]:
    """A failing test that used a Kafka cluster carries the tail of every node's log."""
    report = yield
    if report.failed:
        for name in ("_kafka_session", "_kafka3_session", "_kafka_secure_session"):
            cluster = getattr(item, "funcargs", {}).get(name)
            if cluster is not None:
                report.sections.append((f"Kafka logs ({name.strip('_')})", cluster.explain()))
    return report


@pytest.fixture(scope="session")
def java_peers(peers_dir: Path) -> Path:
    """The peers dir, once it holds the compiled Java driver; otherwise skip with the reason."""
    if shutil.which("java") is None:
        pytest.skip("java is not installed (the Java client tests need a JRE)")
    classes = peers_dir / "java" / "classes" / "ConsumerDriver.class"
    jars = list((peers_dir / "java" / "lib").glob("kafka-clients-*.jar"))
    if not (classes.is_file() and jars):
        pytest.skip(f"Java client not installed in {peers_dir} (run `make peers`; needs javac)")
    return peers_dir


@pytest.fixture(scope="session")
def kafkajs_peers(peers_dir: Path) -> Path:
    """The peers dir, once it holds kafkajs (tests/support/peers.py); otherwise skip with the
    reason."""
    from tests.support.peers import kafkajs_modules

    if shutil.which("node") is None:
        pytest.skip("node is not installed (the kafkajs tests need Node.js)")
    if not (kafkajs_modules(peers_dir) / "kafkajs" / "package.json").is_file():
        pytest.skip(f"kafkajs not installed in {peers_dir} (run `make peers`; needs npm)")
    return peers_dir


@pytest.fixture
def server(tmp_path: Path, peers_dir: Path) -> Iterator[Any]:
    """Factory: server(topics={"t": 12}, initial_rebalance_delay_ms=0, ..., extra=[...]) -> Broker.

    Keyword options map to `groupcoord serve --option-name VALUE`; None leaves an option out. The
    broker is killed at teardown.
    """
    started: list[realclients.Broker] = []
    if os.environ.get("GROUPCOORD_TEST_BROKER") == "tansu" and not (
        peers_dir / "bin" / "tansu"
    ).is_file():
        pytest.skip(f"tansu not installed in {peers_dir} (run `make peers`)")

    def start(topics: Mapping[str, int] | None = None, extra: list[str] | None = None,
              **options: Any) -> realclients.Broker:
        defaults: dict[str, Any] = {"initial_rebalance_delay_ms": 0,
                                    "session_timeout_min_ms": 1000,
                                    "session_timeout_max_ms": 300000,
                                    # Off: a fixed metrics port would collide between servers.
                                    "metrics_listen": ""}
        defaults.update(options)
        broker = realclients.start_broker(tmp_path, peers_dir, dict(topics or {"t": 12}), defaults,
                                      list(extra or []))
        started.append(broker)
        return broker

    yield start
    for broker in started:
        broker.stop()


@pytest.fixture
async def swarms(request: pytest.FixtureRequest, tmp_path: Path,
                 peers_dir: Path) -> AsyncIterator[Any]:
    """Factory: await swarms(kind, name, n, bootstrap=..., group=..., topic=..., ...) -> Swarm:
    n consumers (confluent or java) in one driver process. Killed at teardown."""
    started: list[realclients.Swarm] = []

    async def start(kind: str, name: str, n: int, **kw: Any) -> realclients.Swarm:
        if kind == "java":
            request.getfixturevalue("java_peers")
            driver = peers_dir / "java" / "classes" / "ConsumerDriver.class"
            if b"members" not in driver.read_bytes():  # a driver compiled before --members
                pytest.skip(f"the Java driver in {peers_dir} has no --members (run `make peers`)")
        swarm = await realclients.start_swarm(tmp_path, peers_dir, kind, name, n, **kw)
        started.append(swarm)
        return swarm

    yield start
    for swarm in started:
        swarm.kill()
    for swarm in started:
        try:
            await asyncio.wait_for(swarm.proc.wait(), 10)
        finally:
            if swarm.reader is not None:
                swarm.reader.cancel()


@pytest.fixture
async def members(tmp_path: Path, peers_dir: Path) -> AsyncIterator[Any]:
    """Factory: await members(kind, name, bootstrap=..., group=..., topic=..., ...) -> Member.

    Every driver still running at teardown is SIGKILLed.
    """
    started: list[realclients.Member] = []

    async def start(kind: str, name: str, **kw: Any) -> realclients.Member:
        m = await realclients.start_member(tmp_path, peers_dir, kind, name, **kw)
        started.append(m)
        return m

    yield start
    for m in started:
        m.kill()
    for m in started:
        try:
            await asyncio.wait_for(m.proc.wait(), 10)  # SIGKILLed: only a zombie's reaping
        finally:
            if m.reader is not None:
                m.reader.cancel()

"""Issue 27 end to end: topics as real clients see them, standalone and through the sidecar.

1. An idle consumer costs (almost) nothing: every client kind, subscribed to a topic with no data,
   long-polls Fetch instead of spinning (standalone advertises Produce so that librdkafka enables
   fetching at all; coordinator.broker.answers).
2. A deleted topic costs one rebalance: two consumers share two topics; one topic is deleted; each
   consumer loses that topic's partitions and sees exactly one assign callback, the group owns
   exactly the other topic's partitions, and its generation rose once (coordinator.core.topic_watch:
   the members start that rebalance, as with Kafka).
3. A topic re-created under its name: one rebalance.
4. Through the sidecar, a consumer that subscribes right after a producer auto-created the topic
   reads at once: a topic's first appearance arms no NOT_LEADER_OR_FOLLOWER guard.

Observation windows (the CPU measurement, "no further rebalance in the next 10 s") are windows by
design; every other wait is a condition with a deadline.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import realclients as rc
from tests.support import sidecar_util as su
from tests.support.realclients import Member, wait_until
from tests.support.sidecar_util import stack, upstream

__all__ = ["stack", "upstream"]  # the fixtures
pytestmark = pytest.mark.clients

IDLE_KINDS = ("confluent", "aiokafka", "kafka-python", "java", "kafkajs")
WINDOW_S = 10.0
CPU_LIMIT_S = 1.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (all its threads) so far, from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def window(seconds: float) -> None:
    """An observation window: what happens (or must not happen) during it is the test."""
    await asyncio.sleep(seconds)


class Where:
    """Standalone groupcoord, or the sidecar in front of tansu or of the shared Kafka: a
    bootstrap, topic admin, and the coordinator's view of a group (its /groups page). `prefix`
    starts the names of the topics the pattern consumers see (unique on the shared Kafka)."""

    def __init__(self, bootstrap: str, groups_url: str, admin: str, prefix: str = "lc-") -> None:
        self.bootstrap = bootstrap
        self.groups_url = groups_url
        self.admin = admin  # where topics are created: groupcoord itself, tansu, or Kafka
        self.prefix = prefix
        self.topic_a, self.topic_b = f"{prefix}a", f"{prefix}b"

    def group(self, group_id: str) -> dict[str, Any] | None:
        with urllib.request.urlopen(self.groups_url, timeout=5) as response:
            groups = json.loads(response.read())
        return next((g for g in groups if g["group_id"] == group_id), None)


@pytest.fixture(params=["standalone", "sidecar"])
async def where(request: Any, server: Any, tmp_path: Path, peers_dir: Path) -> Any:
    """"sidecar-kafka" (the shared Kafka upstream) only where a test asks for it (indirect)."""
    # Both consumers of a test join the first generation (they start ~1 s apart), so that each
    # gets one partition of each topic, as in the scenario.
    delay = "3000"
    if request.param == "standalone":
        port = rc.free_port()
        broker = server(topics={}, metrics_listen=f"127.0.0.1:{port}",
                        initial_rebalance_delay_ms=delay)
        yield Where(broker.bootstrap, f"http://127.0.0.1:{port}/groups", broker.bootstrap)
        return
    stack = su.Stack(tmp_path, peers_dir)
    try:
        if request.param == "sidecar-kafka":
            from tests.support.kafka import unique

            upstream, prefix = request.getfixturevalue("kafka").bootstrap, unique("lc") + "-"
        else:
            upstream, prefix = stack.tansu().bootstrap, "lc-"
        sidecar = stack.sidecar(upstream, "--initial-rebalance-delay-ms", delay)
        w = Where(sidecar.bootstrap, f"http://127.0.0.1:{sidecar.metrics_port}/groups",
                  upstream, prefix)
        w.stack = stack  # type: ignore[attr-defined]
        w.sidecar = sidecar  # type: ignore[attr-defined]
        yield w
    finally:
        await stack.close()


def admin_client(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})


def create_topics(bootstrap: str, topics: dict[str, int]) -> None:
    from confluent_kafka.admin import NewTopic

    admin = admin_client(bootstrap)  # held: its futures fail once it is destroyed
    futures = admin.create_topics(
        [NewTopic(name, partitions, 1) for name, partitions in topics.items()]
    )
    for future in futures.values():
        future.result(15)


def delete_topic(bootstrap: str, name: str) -> None:
    admin = admin_client(bootstrap)
    for future in admin.delete_topics([name]).values():
        future.result(15)


async def until(predicate: Callable[[], Any], timeout: float, what: str,
                explain: Callable[[], str] | None = None) -> Any:
    return await wait_until(predicate, timeout, what, explain=explain)


# ------------------------------------------------------------------------------- 1. idle CPU


# A measurement of CPU: not beside the 100-member swarms or Spark (the "heavy" group runs one test
# at a time on one worker; tests/conftest.py, "parallel runs").
@pytest.mark.xdist_group("heavy")
async def test_idle_consumers_long_poll_instead_of_spinning(
    where: Where, members: Callable[..., Awaitable[Member]], request: Any
) -> None:
    create_topics(where.admin, {"idle": 2})
    started: list[Member] = []
    for kind in IDLE_KINDS:
        try:
            rc.require_kind(request, kind)
        except pytest.skip.Exception:
            continue
        started.append(await members(kind, f"idle-{kind}", bootstrap=where.bootstrap,
                                     group=f"idle-{kind}", topic="idle",
                                     heartbeat_interval_ms=3000, metadata_max_age_ms=300_000))
    assert started
    await until(lambda: all(m.owned for m in started), 90, "every consumer to own partitions",
                lambda: rc.explain_members(started))
    before = {m.name: cpu_seconds(m.proc.pid) for m in started}
    await window(WINDOW_S)
    used = {m.name: round(cpu_seconds(m.proc.pid) - before[m.name], 2) for m in started}
    print(f"CPU seconds in {WINDOW_S} s idle: {used}")
    assert all(m.running() for m in started), rc.explain_members(started)
    assert all(seconds < CPU_LIMIT_S for seconds in used.values()), (
        f"CPU seconds used in {WINDOW_S} s of idling: {used}\n{rc.explain_members(started)}"
    )


# ------------------------------------------------------------ 2 and 3. deletion, re-creation


async def start_pattern_consumer(tmp: Path, peers: Path, kind: str, name: str, bootstrap: str,
                                 group: str, prefix: str = "lc-") -> Member:
    """librdkafka with cooperative-sticky, or Java with eager range, on the pattern
    ^{prefix}.*, with the client's default metadata refresh."""
    pattern = f"^{prefix}.*"
    if kind == "java":
        command = rc.driver_command(
            "java", peers,
            ["--bootstrap", bootstrap, "--group", group, "--topic", pattern,
             "--assignors", "range", "--client-id", name, "--heartbeat-interval-ms", "1000",
             "--metadata-max-age-ms", "-1"])
    else:
        command = [sys.executable, "-m", "tests.clients.pattern_consumer", "--bootstrap",
                   bootstrap, "--group", group, "--pattern", pattern, "--client-id", name]
    log_path = tmp / f"pattern-{name}.log"
    env = dict(os.environ, PYTHONPATH=str(rc.REPO), PYTHONUNBUFFERED="1")
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=log,
            cwd=rc.REPO, env=env, start_new_session=True)
    member = Member(kind, name, proc, log_path)
    member.reader = asyncio.create_task(member._read())
    return member


def assigns(m: Member) -> int:
    return sum(1 for e in m.events if e["event"] == "assigned")


def owned(m: Member) -> frozenset[str]:
    return frozenset(m.owned or ())


async def two_consumers_on_two_topics(where: Where, tmp: Path, peers: Path, kind: str,
                                      group: str, started: list[Member]) -> int:
    """Two consumers by pattern on lc-a and lc-b (2 partitions each), settled: -> generation."""
    topic_a, topic_b = where.topic_a, where.topic_b
    create_topics(where.admin, {topic_a: 2, topic_b: 2})
    for i in range(2):
        started.append(await start_pattern_consumer(tmp, peers, kind, f"{group}-{i}",
                                                    where.bootstrap, group, where.prefix))
    everything = {f"{t}:{p}" for t in (topic_a, topic_b) for p in range(2)}
    last: list[Any] = []

    def settled() -> Any:
        """Stable, both topics shared out, and nothing moved since the previous poll (a pattern
        consumer may rejoin once more as its metadata catches up with the new topics)."""
        g = where.group(group)
        now = (None if g is None else g["generation_id"], [assigns(m) for m in started])
        same, last[:] = last == [now], [now]
        ok = (g is not None and g["state"] == "Stable" and g["rebalancing"] is None
              and len(g["members"]) == 2
              and owned(started[0]) | owned(started[1]) == everything
              and not owned(started[0]) & owned(started[1]))
        if ok:  # one partition of each topic each: nothing has to move when lc-b goes
            layout = [sorted(p.split(":")[0] for p in owned(m)) for m in started]
            assert layout == [[topic_a, topic_b]] * 2, f"unexpected assignment {layout}"
        return now[0] if ok and same else None

    return int(await wait_until(settled, 90, "the group to settle on both topics", interval=2.0,
                                explain=lambda: rc.explain_members(started)))


@pytest.mark.parametrize(("where", "kind"), [
    ("standalone", "confluent"), ("standalone", "java"), ("sidecar", "confluent"),
    ("sidecar", "java"), ("sidecar-kafka", "confluent"),
], indirect=["where"])  # fmt: skip
async def test_a_deleted_topic_costs_one_rebalance(where: Where, tmp_path: Path, peers_dir: Path,
                                                   kind: str, request: Any) -> None:
    rc.require_kind(request, kind)
    if kind == "java":
        # kafka-clients 4.4 (3.9.1 before) rejoins once more after the deletion's rebalance. Not
        # yet compared with Kafka 4.4 deleting a topic: kept visible, not hidden.
        request.applymarker(pytest.mark.xfail(reason="kafka-clients 4.4 rejoins a second time "
                                              "after a topic deletion", strict=False))
    group = f"del-{kind}"
    started: list[Member] = []
    try:
        generation = await two_consumers_on_two_topics(where, tmp_path, peers_dir, kind, group,
                                                       started)
        counts = [assigns(m) for m in started]
        delete_topic(where.admin, where.topic_b)
        remaining = {f"{where.topic_a}:0", f"{where.topic_a}:1"}

        def moved() -> bool:
            return (all(assigns(m) == c + 1 for m, c in zip(started, counts, strict=True))
                    and owned(started[0]) | owned(started[1]) == remaining)

        await until(moved, 10, "each consumer to drop lc-b with one assign callback",
                    lambda: rc.explain_members(started))
        await window(WINDOW_S)  # and nothing more: no second rebalance
        assert [assigns(m) for m in started] == [c + 1 for c in counts], (
            rc.explain_members(started))
        assert owned(started[0]) | owned(started[1]) == remaining
        assert not owned(started[0]) & owned(started[1])
        g = where.group(group)
        assert g is not None and g["generation_id"] == generation + 1, g
        assert g["rebalances"][0]["cause"] == "topic_deleted", g["rebalances"]
    finally:
        for m in started:
            m.kill()
        for m in started:
            await m.proc.wait()


async def test_a_recreated_topic_costs_one_rebalance(where: Where, tmp_path: Path,
                                                     peers_dir: Path) -> None:
    group = "recreate"
    started: list[Member] = []
    try:
        generation = await two_consumers_on_two_topics(where, tmp_path, peers_dir, "confluent",
                                                       group, started)
        delete_topic(where.admin, where.topic_b)
        create_topics(where.admin, {where.topic_b: 2})

        def rebalanced() -> Any:
            g = where.group(group)
            return g is not None and g["generation_id"] > generation and g["state"] == "Stable"

        await until(rebalanced, 15, "the group to rebalance for the re-created topic",
                    lambda: rc.explain_members(started))
        await window(WINDOW_S)
        g = where.group(group)
        assert g is not None and g["generation_id"] == generation + 1, g
        assert owned(started[0]) | owned(started[1]) == {
            f"{t}:{p}" for t in (where.topic_a, where.topic_b) for p in range(2)
        }, rc.explain_members(started)
    finally:
        for m in started:
            m.kill()
        for m in started:
            await m.proc.wait()


# ------------------------------------------------------- 4. a new topic through the sidecar


@pytest.mark.parametrize("kind", ["aiokafka", "confluent"])
async def test_a_just_created_topic_is_read_at_once_through_the_sidecar(
    stack: su.Stack, upstream: su.Upstream, kind: str
) -> None:
    # groupcoord's own refresh registers the topic after the clients read it: aiokafka's Metadata
    # (< v10, no topic ids) does not register a topic as it passes through (sidecar.proxy).
    sidecar = stack.sidecar(upstream.bootstrap, refresh_ms=5000)
    topic = upstream.name(f"auto-{kind}")
    await su.produce(sidecar.bootstrap, topic, ["k0", "k1", "k2", "k3"])  # auto-creates it
    member = await stack.consumer(kind, f"new-{kind}", sidecar.bootstrap, f"new-{kind}", topic)
    await until(lambda: member.owned, 60, "the consumer to be assigned", stack.explain)
    assigned_at = next(e["t"] for e in member.events if e["event"] == "assigned" and
                       e["partitions"])
    await until(lambda: su.records(member), 10, "the first record", stack.explain)
    # The sidecar registers the topic (its first appearance), which must arm nothing.
    await until(lambda: f"upstream topic {topic} has" in sidecar.log(), 15,
                "the sidecar's refresh to register the topic", stack.explain)
    await window(3)  # the consumer keeps fetching meanwhile
    first = next(e["t"] for e in member.events if e["event"] == "records")
    # The guard never answered for the upstream: no client was refused the new topic.
    answers = {line.split('"')[1]: float(line.rsplit(" ", 1)[1])
               for line in sidecar.metrics().splitlines()
               if line.startswith("groupcoord_topic_signal_answers_total{")}
    assert answers == {"stale_metadata": 0.0, "topic_gone": 0.0}, answers
    # Reported, not a timed assertion: before, the guard held it for 10 s.
    print(f"{kind}: first record {first - assigned_at:.2f} s after the assignment")
    assert sorted(k for _, _, k in su.records(member)) == ["k0", "k1", "k2", "k3"]


def test_standalone_refuses_produce_with_a_final_error(server: Any) -> None:
    from confluent_kafka import KafkaError, Producer

    broker = server(topics={"orders": 2})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 3,
                         "message.timeout.ms": 60000})
    errors: list[Any] = []
    producer.produce("orders", b"v", partition=0, on_delivery=lambda err, msg: errors.append(err))
    # A final error well before message.timeout.ms (60 s): no retrying.
    assert producer.flush(30) == 0
    assert [e.code() for e in errors] == [KafkaError.INVALID_REQUEST], errors


async def test_a_topics_first_appearance_is_not_stale_metadata_through_the_sidecar(
    stack: su.Stack, upstream: su.Upstream
) -> None:
    """The issue's order, made deterministic: a client reads a new topic's metadata through the
    sidecar (Metadata v4: no topic id, so groupcoord does not take the topic from the answer),
    then groupcoord's refresh registers the topic, then the client asks for offsets."""
    sidecar = stack.sidecar(upstream.bootstrap, refresh_ms=600_000)  # only on demand
    fresh, other = upstream.name("fresh"), upstream.name("other")
    await su.create_topic(upstream.bootstrap, fresh, 2)  # straight upstream: unknown to groupcoord
    client = await su.RawClient.connect(sidecar.port)
    try:
        wanted = (su.kio(3, 4, "MetadataRequestTopic", name=fresh),)
        md = await client.call(su.kio(3, 4, "MetadataRequest", topics=wanted,
                                      allow_auto_topic_creation=False))
        assert [len(t.partitions) for t in md.topics] == [2], md
        # A topic admin request through the sidecar brings its refresh forward.
        await su.create_topic(sidecar.bootstrap, other, 1)
        await until(lambda: f"upstream topic {fresh} has 2 partitions" in sidecar.log(), 15,
                    "groupcoord's refresh to register the topic", stack.explain)
        parts = tuple(su.kio(2, 5, "ListOffsetsPartition", partition_index=p, timestamp=-1)
                      for p in range(2))
        topic = su.kio(2, 5, "ListOffsetsTopic", name=fresh, partitions=parts)
        offsets = await client.call(su.kio(2, 5, "ListOffsetsRequest", replica_id=-1,
                                           isolation_level=0, topics=(topic,)))
        errors = [p.error_code for t in offsets.topics for p in t.partitions]
        assert errors == [0, 0], offsets  # the upstream's answer, not NOT_LEADER_OR_FOLLOWER
    finally:
        client.close()
    assert "groupcoord_topic_signal_answers_total{why=\"stale_metadata\"} 0.0" in sidecar.metrics()

"""`serve --workers N`: N fleet members on one host sharing the client port (SO_REUSEPORT).

The workers are one fleet (between them they serve every state partition once), a real client
commits and reads back offsets through the shared port, a worker killed with kill -9 is started
again by the parent without losing an acknowledged commit, SIGTERM stops them all, and
`--workers` without a fleet is refused (coordinator.sidecar.workers).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode

from coordinator.sidecar.state_topic import partition_for
from coordinator.sidecar.worker_nodes import NODE_BASE
from tests.sidecar.test_fleet import Committer, serving, settled
from tests.sidecar.test_fleet_start import commit_on_first_assignment
from tests.support import realclients as rc
from tests.support.sidecar_util import (
    REPO,
    RawClient,
    Sidecar,
    Stack,
    create_topic,
    fetch,
    kio,
    metadata,
    produce,
    stack,
)

pytestmark = pytest.mark.clients
__all__ = ["stack"]

_STARTED = re.compile(r"worker (\d+) started \(pid (\d+)\)")
_BROKER_PORT = re.compile(r"listening on 127\.0\.0\.1:(\d+) for upstream broker")
TANSU_NODE_ID = 111


def worker_views(parent: Sidecar, n: int) -> list[Sidecar]:
    """Each worker as a Sidecar handle: the shared client port, its own metrics port."""
    return [replace(parent, metrics_port=parent.metrics_port + i) for i in range(n)]


def worker_pids(parent: Sidecar) -> dict[int, int]:
    """Worker index -> its latest pid, from the parent's log."""
    return {int(i): int(pid) for i, pid in _STARTED.findall(parent.log())}


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose: the parent has not reaped it yet.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


async def _workers(stack: Stack, *extra: str, n: int = 2) -> tuple[Sidecar, list[Sidecar]]:
    t = stack.tansu()
    parent = stack.sidecar(t.bootstrap, *extra, fleet=True, workers=n)
    workers = worker_views(parent, n)
    await rc.wait_until(lambda: len(worker_pids(parent)) == n, 30, "the workers to start",
                        explain=stack.explain)
    await settled(stack, workers, timeout=90)
    return parent, workers


@pytest.mark.parametrize("broker_ports", ["ephemeral", "fixed"])
async def test_two_workers_are_one_fleet_behind_one_port(stack: Stack, broker_ports: str) -> None:
    """Ephemeral broker ports: each worker its own, named in its own Metadata answers. Fixed
    (`--broker-port-base`): shared by the workers like the client port."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    base = str(rc.free_port() - TANSU_NODE_ID)
    extra = ("--broker-port-base", base) if broker_ports == "fixed" else ()
    parent, workers = await _workers(stack, *extra)
    listening = _BROKER_PORT.findall(parent.log())  # each worker listens for the broker
    assert len(listening) == 2 and len(set(listening)) == (1 if extra else 2), listening
    assert re.search(r"groupcoord\.fleet: fleet member .* worker=1", parent.log()), parent.log()
    owned = [serving(w) for w in workers]
    assert all(owned) and not owned[0] & owned[1], owned
    topic = "workers-t"
    await create_topic(stack.tansus[0].bootstrap, topic, 4)
    # Several clients, several connections: the kernel spreads them over both workers, and
    # every group answers through whichever worker a client reached.
    for i in range(6):
        group = f"workers-g{i}"
        consumer = AIOKafkaConsumer(bootstrap_servers=parent.bootstrap, group_id=group,
                                    enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(4)]
            consumer.assign(tps)
            await consumer.commit({tp: OffsetAndMetadata(10 * i + tp.partition, "")
                                   for tp in tps})
            for tp in tps:
                assert await consumer.committed(tp) == 10 * i + tp.partition
        finally:
            await consumer.stop()
        assert await fetch(parent.port, group, topic, 4) == {p: 10 * i + p for p in range(4)}
    # Both workers took client connections (a group request reached each of them).
    accepted = [_connections(w) for w in workers]
    assert all(accepted), accepted


def _connections(w: Sidecar) -> float:
    total = 0.0
    for line in w.metrics().splitlines():
        if line.startswith("groupcoord_connections_accepted_total"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def test_a_worker_killed_is_started_again_and_loses_no_commit(stack: Stack) -> None:
    parent, workers = await _workers(stack)
    topic = "workers-kill"
    await create_topic(stack.tansus[0].bootstrap, topic, 1)
    committers = [Committer(parent.port, [f"kill-g{i}" for i in range(j, 12, 3)], topic)
                  for j in range(3)]
    for c in committers:
        c.start()
    await rc.wait_until(lambda: all(len(c.acked) == len(c.groups) for c in committers), 60,
                        "commits acknowledged for every group", explain=stack.explain)
    before = worker_pids(parent)
    os.kill(before[1], signal.SIGKILL)
    await rc.wait_until(lambda: worker_pids(parent).get(1) not in (None, before[1]), 30,
                        "the parent to start worker 1 again", explain=stack.explain)
    assert parent.proc.poll() is None
    assert f"worker 1 (pid {before[1]}) died" in parent.log()
    await settled(stack, workers, timeout=90)
    marks = {id(c): dict(c.acked) for c in committers}
    await rc.wait_until(lambda: all(any(c.acked[g] > marks[id(c)][g] for g in c.groups)
                                    for c in committers),
                        60, "commits acknowledged again after the restart", explain=stack.explain)
    for c in committers:
        await c.stop()
    lost = []
    for c in committers:
        for g, acked in c.acked.items():
            got = await fetch(parent.port, g, topic, 1)
            if not isinstance(got, dict) or got[0] < acked:
                lost.append((g, got, acked))
    assert not lost, f"{lost}\n{stack.explain()}"

    # SIGTERM to the parent stops every worker, and the parent exits 0 after them.
    pids = worker_pids(parent)
    parent.proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(parent.proc.wait, 60) == 0, parent.log()
    assert not [p for p in pids.values() if alive(p)], pids


def test_workers_without_a_fleet_are_refused() -> None:
    for extra in ([], ["--upstream", "127.0.0.1:1", "--state", "local"]):
        done = subprocess.run(
            [sys.executable, "-m", "coordinator.cli", "serve", "--workers", "2",
             "--listen", f"127.0.0.1:{rc.free_port()}", *extra],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr
        assert "--workers: needs a sidecar fleet" in done.stderr, done.stderr


# -- each worker a coordinator node of its own (coordinator.sidecar.worker_nodes) ---------------


def forwarded(workers: list[Sidecar]) -> float:
    """Group requests the workers forwarded to one another (their metrics, summed)."""
    total = 0.0
    for w in workers:
        for line in w.metrics().splitlines():
            if line.startswith("groupcoord_fleet_forwarded_requests_total"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def answered(w: Sidecar, api: str) -> float:
    """Requests of `api` this worker answered itself, any error."""
    total = 0.0
    for line in w.metrics().splitlines():
        if line.startswith("groupcoord_requests_total{") and f'api="{api}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def group_owned_by(workers: list[Sidecar], index: int, prefix: str) -> str:
    """A group name whose state partition worker `index` serves."""
    mine = serving(workers[index])
    return next(g for n in range(10_000) if partition_for(g := f"{prefix}-{n}", 50) in mine)


@pytest.mark.parametrize("kind", ["confluent", "aiokafka"])
async def test_group_requests_go_straight_to_the_owning_worker(stack: Stack, kind: str) -> None:
    """FindCoordinator names the node of the worker owning the group, which Metadata lists: a
    real client's group requests (join, sync, heartbeats, commits, leave) reach the owner with
    none forwarded between the workers, and each worker answers its own group's commits."""
    parent, workers = await _workers(stack)
    topic = "workers-route"
    await create_topic(stack.tansus[0].bootstrap, topic, 2)
    groups = [group_owned_by(workers, i, f"route-{kind}") for i in range(2)]
    before = forwarded(workers)
    commits = [answered(w, "OffsetCommit") for w in workers]
    members = [await stack.consumer(kind, f"route-{i}", parent.bootstrap, g, topic)
               for i, g in enumerate(groups)]
    await rc.wait_until(lambda: all(rc.partition_of([m], 2) for m in members), 90,
                        "each group's consumer to own both partitions", explain=stack.explain)
    await produce(stack.tansus[0].bootstrap, topic, [f"k{i}" for i in range(20)])
    await rc.wait_until(
        lambda: all(sum(len(e["offsets"]) for e in m.events if e["event"] == "committed") >= 2
                    for m in members),
        60, "each consumer to commit what it read", explain=stack.explain)
    assert all(answered(w, "OffsetCommit") > c for w, c in zip(workers, commits, strict=True))
    assert forwarded(workers) - before == 0, stack.explain()
    errors = [e for m in members for e in m.events if e["event"] == "error"]
    assert not errors, errors
    # On the wire: each group its owner's node, and both nodes listed (Metadata, DescribeCluster)
    client = await RawClient.connect(parent.port)
    try:
        nodes = []
        for g in groups:
            found = await client.call(kio(10, 3, "FindCoordinatorRequest", key=g, key_type=0))
            assert found.error_code == ErrorCode.none
            nodes.append((found.node_id, found.port))
        assert [n for n, _ in nodes] == [NODE_BASE, NODE_BASE + 1]
        meta = await client.call(metadata())
        cluster = await client.call(kio(60, 1, "DescribeClusterRequest", endpoint_type=1,
                                        include_cluster_authorized_operations=False))
        for listed in (meta.brokers, cluster.brokers):
            ids = {getattr(b, "node_id", getattr(b, "broker_id", None)): b.port for b in listed}
            assert {n: ids.get(n) for n, _ in nodes} == dict(nodes), listed
    finally:
        client.close()


async def test_the_owning_worker_killed_its_client_recovers_and_loses_no_commit(
        stack: Stack) -> None:
    """A client whose coordinator is worker 1's node: worker 1 killed with kill -9, the client
    finds its coordinator again (a closed connection, then FindCoordinator), its commits are
    acknowledged again, and none acknowledged before or after is lost."""
    from aiokafka import AIOKafkaConsumer, TopicPartition
    from aiokafka.structs import OffsetAndMetadata

    parent, workers = await _workers(stack)
    topic = "workers-kill-owner"
    await create_topic(stack.tansus[0].bootstrap, topic, 1)
    group = group_owned_by(workers, 1, "kill-owner")
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=parent.bootstrap, group_id=group,
                                enable_auto_commit=False, request_timeout_ms=15_000)
    await consumer.start()
    acked: list[int] = []
    failures: list[str] = []

    async def commit_forever() -> None:
        n = 0
        while True:
            n += 1
            try:
                await consumer.commit({tp: OffsetAndMetadata(n, "")})
            except Exception as exc:  # counted: the assertion below says which
                failures.append(repr(exc))
                await asyncio.sleep(0.1)
                continue
            acked.append(n)
            await asyncio.sleep(0.01)

    consumer.assign([tp])
    task = asyncio.create_task(commit_forever())
    try:
        await rc.wait_until(lambda: len(acked) >= 5, 60, "commits acknowledged",
                            explain=stack.explain)
        # Its coordinator is the owner's own node (aiokafka's private coordinator state).
        assert consumer._coordinator.coordinator_id == NODE_BASE + 1
        before = worker_pids(parent)
        os.kill(before[1], signal.SIGKILL)
        mark = len(acked)
        await rc.wait_until(lambda: len(acked) >= mark + 5, 90,
                            "commits acknowledged again after worker 1's kill -9",
                            explain=stack.explain)
        assert worker_pids(parent).get(1) != before[1]  # started again by the parent
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await consumer.stop()
    last = acked[-1]
    got: list[dict[int, int] | int] = []

    async def fetched() -> bool:  # the restarted worker may be taking partitions back: retried
        got.append(await fetch(parent.port, group, topic, 1))
        return isinstance(got[-1], dict)

    await rc.wait_until(fetched, 60, "the offset fetched", explain=stack.explain)
    offsets = got[-1]
    assert isinstance(offsets, dict) and offsets[0] >= last, (got, last, failures)


async def test_java_consumers_go_straight_to_the_owning_worker(
        request: pytest.FixtureRequest, stack: Stack) -> None:
    """The Java client keeps its coordinator connection under id Integer.MAX_VALUE - node: the
    workers' node ids (NODE_BASE + i) must not make it collide with a broker's connection. Two
    consumers, their groups owned by different workers, commit with none forwarded."""
    rc.require_kind(request, "java")
    parent, workers = await _workers(stack)
    topic = "workers-java"
    await create_topic(stack.tansus[0].bootstrap, topic, 2)
    groups = [group_owned_by(workers, i, "route-java") for i in range(2)]
    before = forwarded(workers)
    members = await asyncio.gather(*(
        rc.start_member(stack.tmp, stack.peers, "java", f"java-{i}", bootstrap=parent.bootstrap,
                        group=g, topic=topic)
        for i, g in enumerate(groups)))
    stack.members.extend(members)
    await asyncio.gather(*(commit_on_first_assignment(stack, m, 120) for m in members))
    errors = [(m.name, e) for m in members for e in m.events
              if e["event"] in ("commit_failed", "error")]
    assert not errors, f"{errors}\n{stack.explain()}"
    assert forwarded(workers) - before == 0, stack.explain()


async def test_clients_started_with_the_workers_see_no_error(
        request: pytest.FixtureRequest, stack: Stack) -> None:
    """Clients that start together with `--workers 2` ask FindCoordinator while no worker owns
    their group yet (COORDINATOR_NOT_AVAILABLE, retried: coordinator.sidecar.worker_nodes), then
    join and commit synchronously on their first assignment without an error reaching them."""
    rc.require_kind(request, "java")
    tansu = stack.tansu()
    topic = "workers-born-together"
    await create_topic(tansu.bootstrap, topic, 2)
    parent = stack.sidecar(tansu.bootstrap, fleet=True, workers=2)
    kinds = ("confluent", "java", "aiokafka")
    members = await asyncio.gather(*(
        rc.start_member(stack.tmp, stack.peers, kind, f"born-{kind}", bootstrap=parent.bootstrap,
                        group=f"workers-born-{kind}", topic=topic)
        for kind in kinds))
    stack.members.extend(members)

    await asyncio.gather(*(commit_on_first_assignment(stack, m, 120) for m in members))
    errors = [(m.name, e) for m in members for e in m.events
              if e["event"] in ("commit_failed", "error")]
    assert not errors, f"{errors}\n{stack.explain()}"

"""The audit of a fleet's history topic: local[*] against a 1-worker Spark standalone cluster
(issue 25), in the same run.

1,000,000 synthetic history events (--quick: 100,000; pipeline/synthetic.py, 200 groups) are
written to a tansu topic of 10 partitions as a fleet writes them (coordinator/sidecar/
history_topic.py's record layout and partitioner, 1 MiB batches), then `groupcoord audit
--bootstrap-server` (all four tables and the report) runs twice, each in a fresh interpreter and
JVM, unpinned: with `--master local[*]` (every core of the machine) and against a standalone
cluster of one master and one worker with 1 core (tests/support/spark_cluster.py), started
beforehand on 127.0.0.1. Reported: the job time (without the driver's Spark start-up), events/s,
and the cluster's time over local[*]'s. On this 2-core machine local[*] has two task slots and
the cluster one, and the cluster pays for its executor's start and its RPCs: it is the cost of
going through a real cluster, not a speed-up.

    python -m bench --only audit_cluster --quick
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from bench import servers
from bench.__main__ import Context, Metric, register

FULL_EVENTS, QUICK_EVENTS = 1_000_000, 100_000
PARTITIONS = 10


async def write_topic(bootstrap: str, events: int) -> None:
    """`events` synthetic events on the history topic, as the fleet's writer lays them out."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from coordinator.sidecar.history_topic import MAX_BATCH_BYTES, partition_for
    from pipeline.synthetic import synthetic_rows
    from storage.history import HISTORY_TOPIC, WRITER_HEADER, encode_fields

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(HISTORY_TOPIC, PARTITIONS, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=False,
        linger_ms=0,
        max_batch_size=MAX_BATCH_BYTES,
        max_request_size=MAX_BATCH_BYTES + 4096,
    )
    await producer.start()
    headers = [(WRITER_HEADER, b"bench-writer")]
    try:
        batches = {p: producer.create_batch() for p in range(PARTITIONS)}
        acks = []
        for ts, gid, kind, fields in synthetic_rows(events, groups=200):
            key = gid.encode()
            p = partition_for(key, PARTITIONS)
            value = encode_fields(kind, fields)
            if batches[p].append(key=key, value=value, timestamp=ts, headers=headers) is None:
                acks.append(await producer.send_batch(batches[p], HISTORY_TOPIC, partition=p))
                batches[p] = producer.create_batch()
                batches[p].append(key=key, value=value, timestamp=ts, headers=headers)
        for p, batch in batches.items():
            acks.append(await producer.send_batch(batch, HISTORY_TOPIC, partition=p))
        await asyncio.gather(*acks)
    finally:
        await producer.stop()


def run_worker(bootstrap: str, out: Path, master: str, conf: dict[str, str]) -> dict[str, float]:
    """One audit in a fresh interpreter (and JVM)."""
    cmd = [sys.executable, "-m", "bench.scenario_audit_cluster", bootstrap, str(out), master,
           json.dumps(conf)]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=3600, check=False, cwd=servers.REPO
    )
    if proc.returncode != 0:
        raise RuntimeError(f"audit worker ({master}) failed:\n{proc.stderr[-3000:]}")
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


@contextlib.contextmanager
def unpinned() -> Iterator[None]:
    """The bench pins itself to the generator's core; what starts meanwhile gets every core."""
    saved = None
    with contextlib.suppress(OSError, AttributeError):
        saved = os.sched_getaffinity(0)
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    try:
        yield
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)


@register(
    "audit_cluster",
    "audit of a fleet's history topic (1M events; quick: 100k), local[*] vs 1-worker cluster",
    [
        Metric("auditc_events", "events audited", "count"),
        Metric("auditc_write_s", "writing them to the topic (10 partitions)", "s"),
        Metric("auditc_local_s", "local[*]: audit time", "s"),
        Metric("auditc_cluster_s", "standalone, 1 worker x 1 core: audit time", "s"),
        Metric("auditc_local_eps", "local[*]: events/s", "ev/s"),
        Metric("auditc_cluster_eps", "1-worker cluster: events/s", "ev/s"),
        Metric("auditc_ratio", "cluster time / local[*] time", "x"),
        Metric("auditc_cluster_start_s", "cluster start (master + worker registered)", "s"),
    ],
    serverless=True,
)
async def audit_cluster(ctx: Context, server: object) -> dict[str, float]:
    from tests.support.spark_cluster import StandaloneCluster

    tansu_path = servers.tansu_path()
    if tansu_path is None:
        raise RuntimeError("tansu is not installed (make peers)")
    events = QUICK_EVENTS if ctx.quick else FULL_EVENTS
    work = Path(tempfile.mkdtemp(prefix="bench-audit-cluster-"))
    with unpinned():
        tansu = servers.start_tansu(tansu_path, None)
    cluster = StandaloneCluster(work / "cluster", cores=1, memory="2g")
    try:
        bootstrap = f"{servers.HOST}:{tansu.port}"
        t0 = time.monotonic()
        await write_topic(bootstrap, events)
        write_s = time.monotonic() - t0
        local = await asyncio.to_thread(run_worker, bootstrap, work / "local", "local[*]", {})
        t0 = time.monotonic()
        with unpinned():
            await asyncio.to_thread(cluster.start)
        start_s = time.monotonic() - t0
        conf = {**cluster.driver_conf, "spark.executor.memory": "1g"}
        remote = await asyncio.to_thread(run_worker, bootstrap, work / "cluster", cluster.url, conf)
    finally:
        cluster.stop()
        tansu.stop()
        shutil.rmtree(work, ignore_errors=True)
    if local["events"] != events or remote["events"] != events:
        raise RuntimeError(f"audited {local['events']} / {remote['events']} of {events} events")
    return {
        "auditc_events": float(events),
        "auditc_write_s": write_s,
        "auditc_local_s": local["seconds"],
        "auditc_cluster_s": remote["seconds"],
        "auditc_local_eps": events / local["seconds"],
        "auditc_cluster_eps": events / remote["seconds"],
        "auditc_ratio": remote["seconds"] / local["seconds"],
        "auditc_cluster_start_s": start_s,
    }


def _worker(bootstrap: str, out: str, master: str, conf_json: str) -> None:
    # The bench pins its own process (and so this child) to the generator's core: undo that.
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    from pipeline.audit import run_audit, spark_session
    from pipeline.topic import plan

    ranges = plan(bootstrap)
    t0 = time.monotonic()
    spark = spark_session(master, json.loads(conf_json))
    start_s = time.monotonic() - t0
    try:
        summary = run_audit(spark, [], out, topic_ranges=ranges)
    finally:
        spark.stop()
    print(json.dumps({"events": summary.events, "seconds": summary.seconds, "start_s": start_s}))


if __name__ == "__main__":
    _worker(*sys.argv[1:5])

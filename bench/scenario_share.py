"""Share groups through the sidecar (issue 39): a share group's records/s vs a consumer group's on
the same topic through the same sidecar (goal: share / group >= 0.8), and the acknowledgement p99.

One tansu (memory storage) and one `--state local` sidecar in front of it (its log in a temporary
directory, the default fsync=always: an acknowledgement is answered once it is on disk), both
started here. For each layout (1 and 4 partitions) one topic gets RECORDS records (--quick:
QUICK_RECORDS) of RECORD_BYTES bytes, produced straight to tansu in batches of PER_BATCH; then, on
that topic, through the sidecar, each in a fresh group:
- a consumer group: confluent-kafka's Consumer (classic protocol, auto.offset.reset earliest,
  auto commit on) reads them all;
- a share group: confluent-kafka's ShareConsumer (librdkafka's KIP-932 preview) in IMPLICIT
  acknowledgement mode (its default: a poll's records are accepted by the next poll, the
  acknowledgements ride on its ShareFetch) reads them all. The group's share partitions are set to
  start at offset 0 first, with AlterShareGroupOffsets (what `kafka-share-groups --reset-offsets
  --to-earliest` sends): the sidecar starts a share partition at `latest`, Kafka's default for
  share.auto.offset.reset, and has no way yet to be told the group's config.
Both clients run in this process, one at a time, each on its own thread. A rate is counted from
the client's subscribe to the last record (librdkafka reads ahead of its application, so the
first record a poll returns is no start), and the sidecar's CPU (utime + stime from /proc, all
its threads) over the same window gives its CPU per 1,000 records. Rounds alternate group and
share (--quick: 1 round, else 2) and each keeps its best round.

The acknowledgement p99: a raw share member (kio-encoded requests, one at a time, so the
server's latency and not a client's batching) in its own group on the 1-partition topic: a
ShareFetch acquires a batch (PER_BATCH records), then a ShareAcknowledge accepts it: the
ShareAcknowledge round trip, ACK_SAMPLES times (--quick: QUICK_ACK_SAMPLES); the ShareFetch round
trip is reported beside it.

The Kafka reference: the same two clients, the same records, straight against one Kafka 4.4 node
(its own share groups; started after the sidecar and tansu are stopped, so they never share the
machine): the share / group ratio the clients allow. librdkafka's ShareConsumer sends one
ShareFetch at a time (MaxRecords 500) and waits for it, and each carries the previous poll's
acknowledgements, which a broker answers only once they are written; its consumer group keeps
Fetches of up to 1 MiB per partition in flight. (Kafka elects a new topic's leaders a moment
after CreateTopics: one record per partition is produced first, until it is taken.)
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from bench import loadgen, servers
from bench import scenario_kafka as kafka_scenario
from bench import scenario_sidecar as sidecar
from bench.__main__ import Context, Goal, Metric, register

RECORDS, QUICK_RECORDS = 200_000, 100_000
RECORD_BYTES = 100
PER_BATCH = 100
LAYOUTS = (1, 4)
ACK_SAMPLES, QUICK_ACK_SAMPLES = 1000, 150
IN_FLIGHT = 4  # Produce requests in flight per partition
CONSUME_DEADLINE_S = 300.0


@dataclass
class Consumed:
    records: int = 0  # distinct records counted in the window
    deliveries: int = 0  # every record a poll returned (a share group may deliver one twice)
    seconds: float = 0.0
    sidecar_cpu_s: float = 0.0
    errors: int = 0

    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def cpu_ms_per_1000(self) -> float:
        return 1e6 * self.sidecar_cpu_s / self.records if self.records else float("nan")


def read_all(
    subscribe: Callable[[], None],
    poll: Callable[[], Iterable[Any]],
    close: Callable[[], None],
    n: int,
    cpu: Callable[[], float],
) -> Consumed:
    """Poll until `n` distinct (partition, offset) were seen. The window starts at `subscribe`:
    librdkafka fetches ahead of the application, so a window from the first record a poll returns
    would time its queue, not the server; a group's join is in the window (under a second)."""
    seen: set[tuple[int, int]] = set()
    out = Consumed()
    started, cpu0 = time.monotonic(), cpu()
    subscribe()
    deadline = started + CONSUME_DEADLINE_S
    try:
        while len(seen) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(seen)} of {n} records read in {CONSUME_DEADLINE_S}s")
            for m in poll():
                if m.error() is not None:
                    out.errors += 1
                    continue
                out.deliveries += 1
                seen.add((m.partition(), m.offset()))
        out.seconds = time.monotonic() - started
        out.sidecar_cpu_s = cpu() - cpu0
        out.records = len(seen)
    finally:
        close()
    return out


def consume_group(
    bootstrap: str, topic: str, group: str, n: int, cpu: Callable[[], float]
) -> Consumed:
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "log_level": 3,
        }
    )
    return read_all(
        lambda: consumer.subscribe([topic]),
        lambda: consumer.consume(1000, 1.0),
        consumer.close,
        n,
        cpu,
    )


def consume_share(
    bootstrap: str, topic: str, group: str, n: int, cpu: Callable[[], float]
) -> Consumed:
    from confluent_kafka import ShareConsumer

    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "implicit",
            "log_level": 3,
        }
    )
    return read_all(
        lambda: consumer.subscribe([topic]), lambda: consumer.poll(1.0), consumer.close, n, cpu
    )


async def produce(port: int, topic: str, partitions: int, n: int) -> None:
    """`n` records, spread evenly over the partitions, straight to the broker on `port`."""
    batch = sidecar.record_batch(PER_BATCH, RECORD_BYTES)
    per_partition = n // partitions // PER_BATCH
    conns = [await loadgen.connect(servers.HOST, port) for _ in range(partitions)]
    todo = dict.fromkeys(range(partitions), per_partition)

    async def one(conn: loadgen.Conn, partition: int) -> None:
        request = sidecar.produce_v7(topic, partition, batch)
        while True:
            if todo[partition] <= 0:
                return
            todo[partition] -= 1
            error = sidecar.produce_error(await conn.request(request, timeout=60))
            if error:
                raise loadgen.ProtocolError(f"Produce {topic}-{partition}: error {error}")

    try:
        await asyncio.gather(
            *(one(conns[p], p) for p in range(partitions) for _ in range(IN_FLIGHT))
        )
    finally:
        loadgen.close_all(conns)


async def leaders_ready(port: int, topic: str, partitions: int) -> None:
    """One record produced to each partition of a new topic until it is taken: Kafka elects the
    leaders a moment after CreateTopics answers (NOT_LEADER_OR_FOLLOWER, 6, meanwhile). The
    record counts: the consumers then read from offset 1 on (a `produce` of `n` more)."""
    conn = await loadgen.connect(servers.HOST, port)
    try:
        for p in range(partitions):
            request = sidecar.produce_v7(topic, p, sidecar.record_batch(1, RECORD_BYTES))
            deadline = time.monotonic() + 60
            while error := sidecar.produce_error(await conn.request(request, timeout=60)):
                if error not in (3, 6) or time.monotonic() > deadline:
                    raise loadgen.ProtocolError(f"Produce {topic}-{p}: error {error}")
                await asyncio.sleep(0.2)
    finally:
        conn.close()


async def start_at_zero(port: int, group: str, topic: str, partitions: int) -> None:
    """AlterShareGroupOffsets: the group's share partitions of `topic` start at offset 0 (the
    sidecar may not know the topic for a moment after it was created: asked again until it does)."""
    from tests.support.sidecar_util import RawClient, kio

    request = kio(
        91,
        0,
        "AlterShareGroupOffsetsRequest",
        group_id=group,
        topics=(
            kio(
                91,
                0,
                "AlterShareGroupOffsetsRequestTopic",
                topic_name=topic,
                partitions=tuple(
                    kio(91, 0, "AlterShareGroupOffsetsRequestPartition", partition_index=p,
                        start_offset=0)
                    for p in range(partitions)
                ),
            ),
        ),
    )  # fmt: skip
    client = await RawClient.connect(port)
    try:
        deadline = time.monotonic() + 30
        while True:
            r = await client.call(request)
            errors = [r.error_code] + [p.error_code for t in r.responses for p in t.partitions]
            if not any(errors):
                return
            if time.monotonic() > deadline:
                raise loadgen.ProtocolError(f"AlterShareGroupOffsets {group}: {r}")
            await asyncio.sleep(0.2)
    finally:
        client.close()


@dataclass
class AckLatency:
    ack_ns: list[int]
    fetch_ns: list[int]
    errors: int


def pct(xs: list[int], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(p / 100 * len(s)) - 1))] / 1e6 if s else float("nan")


async def ack_latency(port: int, topic: str, group: str, samples: int) -> AckLatency:
    """A raw share member: ShareFetch one batch, ShareAcknowledge it (ACCEPT), `samples` times."""
    from tests.support import share_wire as sw
    from tests.support.sidecar_util import RawClient, kio

    await start_at_zero(port, group, topic, 1)
    client = await RawClient.connect(port)
    member = str(uuid.uuid4())
    out = AckLatency([], [], 0)
    try:
        topic_id = await sw.topic_id(client, topic)
        epoch = 0
        deadline = time.monotonic() + 60
        while True:  # join, until the member is assigned the partition
            r = await client.call(
                kio(76, 1, "ShareGroupHeartbeatRequest", group_id=group, member_id=member,
                    member_epoch=epoch, rack_id=None,
                    subscribed_topic_names=(topic,) if epoch == 0 else None)
            )  # fmt: skip
            if r.error_code:
                raise loadgen.ProtocolError(f"ShareGroupHeartbeat: {r.error_code}")
            epoch = r.member_epoch
            if r.assignment is not None and r.assignment.topic_partitions:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("the raw share member got no assignment")
            await asyncio.sleep(0.1)
        session = 0
        while len(out.ack_ns) < samples:
            sent = time.perf_counter_ns()
            r = await client.call(
                sw.share_fetch(group, member, session, topic_id, max_records=PER_BATCH,
                               max_wait_ms=500)
            )  # fmt: skip
            out.fetch_ns.append(time.perf_counter_ns() - sent)
            session += 1
            got = sw.deliveries(r).get(0)
            if r.error_code or got is None or got.error:
                out.errors += 1
                if out.errors > 10:
                    raise loadgen.ProtocolError(f"ShareFetch: {r}")
                continue
            if not got.acquired:
                raise loadgen.ProtocolError("ShareFetch acquired nothing: the topic ran out")
            acks = {0: [(first, last, sw.ACCEPT) for first, last, _ in got.acquired]}
            sent = time.perf_counter_ns()
            r = await client.call(sw.share_ack(group, member, session, topic_id, acks))
            out.ack_ns.append(time.perf_counter_ns() - sent)
            session += 1
            if r.error_code or any(sw.ack_errors(r).values()):
                out.errors += 1
        await client.call(
            kio(76, 1, "ShareGroupHeartbeatRequest", group_id=group, member_id=member,
                member_epoch=-1, rack_id=None, subscribed_topic_names=None)
        )  # fmt: skip
    finally:
        client.close()
    return out


def _metrics() -> list[Metric]:
    out = []
    for p in LAYOUTS:
        s = f"{p} partition{'s' if p > 1 else ''}"
        out += [
            Metric(f"group_p{p}_rate", f"{s}: consumer group", "records/s"),
            Metric(f"share_p{p}_rate", f"{s}: share group (implicit ack)", "records/s"),
            Metric(f"share_p{p}_ratio", f"{s}: share / consumer group", "ratio", Goal(">=", 0.8)),
            Metric(f"group_p{p}_cpu", f"{s}: sidecar CPU per 1,000, consumer group", "ms"),
            Metric(f"share_p{p}_cpu", f"{s}: sidecar CPU per 1,000, share group", "ms"),
            Metric(f"share_p{p}_redelivered", f"{s}: share deliveries beyond one", "count"),
            Metric(f"kafka_group_p{p}_rate", f"{s}: consumer group, Kafka 4.4 itself", "records/s"),
            Metric(f"kafka_share_p{p}_rate", f"{s}: share group, Kafka 4.4 itself", "records/s"),
            Metric(f"kafka_share_p{p}_ratio", f"{s}: share / consumer group, Kafka 4.4", "ratio"),
            Metric(f"kafka_share_p{p}_cpu", f"{s}: Kafka CPU per 1,000, share group", "ms"),
        ]
    out += [
        Metric("ack_p50", "ShareAcknowledge of one batch, unloaded, p50", "ms"),
        Metric("ack_p99", "ShareAcknowledge of one batch, unloaded, p99", "ms"),
        Metric("share_fetch_p99", "ShareFetch of one batch, unloaded, p99", "ms"),
        Metric("errors", "errors (client + raw)", "count", Goal("<", 1)),
    ]
    return out


async def measure(
    bootstrap: str,
    admin_port: int,
    topic: str,
    p: int,
    n: int,
    rounds: int,
    cpu: Callable[[], float],
) -> tuple[Consumed, Consumed]:
    """The best consumer-group and share-group rounds on `topic` through `bootstrap` (rounds
    alternate group and share, each in a fresh group)."""
    best: dict[str, Consumed] = {}
    for r in range(rounds):
        for kind in ("group", "share"):
            group = f"{kind}-{p}p-{r}"
            if kind == "share":
                await start_at_zero(admin_port, group, topic, p)
            run = consume_group if kind == "group" else consume_share
            got = await asyncio.to_thread(run, bootstrap, topic, group, n, cpu)
            if kind not in best or got.rate() > best[kind].rate():
                best[kind] = got
            best[kind].errors = max(best[kind].errors, got.errors)
    return best["group"], best["share"]


async def kafka_reference(ctx: Context, n: int, rounds: int) -> dict[str, float]:
    """The same two clients straight against Kafka 4.4 (its own share groups): the share/group
    ratio the clients themselves allow, beside ours."""
    out: dict[str, float] = {}
    server = await kafka_scenario.start_kafka(None)
    try:
        for p in LAYOUTS:
            topic = f"share-bench-{p}p"
            await kafka_scenario.create_topic(server.port, topic, p)
            await leaders_ready(server.port, topic, p)
            await produce(server.port, topic, p, n)
            bootstrap = f"{servers.HOST}:{server.port}"
            g, s = await measure(bootstrap, server.port, topic, p, n, rounds, server.cpu_s)
            out[f"kafka_group_p{p}_rate"] = g.rate()
            out[f"kafka_share_p{p}_rate"] = s.rate()
            out[f"kafka_share_p{p}_ratio"] = s.rate() / max(g.rate(), 1e-9)
            out[f"kafka_share_p{p}_cpu"] = s.cpu_ms_per_1000()
    finally:
        server.stop()
    return out


@register(
    "share",
    "share group vs consumer group through the sidecar, in front of tansu (implicit acks)",
    _metrics(),
    serverless=True,
)
async def share(ctx: Context, _server: object) -> dict[str, float]:
    path = servers.tansu_path()
    if path is None:
        raise RuntimeError("tansu not installed (make peers)")
    n = QUICK_RECORDS if ctx.quick else RECORDS
    rounds = 1 if ctx.quick else 2
    samples = QUICK_ACK_SAMPLES if ctx.quick else ACK_SAMPLES
    tansu = servers.start_tansu(path, None)
    proxy: servers.Server | None = None
    out: dict[str, float] = {}
    errors = 0
    try:
        proxy = servers.start_groupcoord(
            None, ["--upstream", f"{servers.HOST}:{tansu.port}", "--state", "local"]
        )
        bootstrap = f"{servers.HOST}:{proxy.port}"
        cpu = proxy.cpu_s
        for p in LAYOUTS:
            topic = f"share-bench-{p}p"
            await kafka_scenario.create_topic(tansu.port, topic, p)
            await produce(tansu.port, topic, p, n)
            g, s = await measure(bootstrap, proxy.port, topic, p, n, rounds, cpu)
            errors += g.errors + s.errors
            out[f"group_p{p}_rate"] = g.rate()
            out[f"share_p{p}_rate"] = s.rate()
            out[f"share_p{p}_ratio"] = s.rate() / max(g.rate(), 1e-9)
            out[f"group_p{p}_cpu"] = g.cpu_ms_per_1000()
            out[f"share_p{p}_cpu"] = s.cpu_ms_per_1000()
            out[f"share_p{p}_redelivered"] = s.deliveries - n
        lat = await ack_latency(proxy.port, f"share-bench-{LAYOUTS[0]}p", "share-ack", samples)
        errors += lat.errors
        out["ack_p50"] = pct(lat.ack_ns, 50)
        out["ack_p99"] = pct(lat.ack_ns, 99)
        out["share_fetch_p99"] = pct(lat.fetch_ns, 99)
        out["errors"] = errors
        proxy.stop()  # (stop is idempotent: the finally below may stop them again)
        tansu.stop()
        try:  # a reference: a failure is a note, the figures above still stand
            out |= await kafka_reference(ctx, n, rounds)
        except Exception as e:
            ctx.notes.append(f"share/kafka reference: failed: {type(e).__name__}: {e}")
        ctx.notes.append(
            f"share: {n:,} records of {RECORD_BYTES} B per topic, {PER_BATCH} per batch; "
            f"{len(lat.ack_ns)} acknowledgement samples; confluent-kafka clients in the bench "
            "process; the Kafka 4.4 rows are the same clients against Kafka's own share groups "
            "(one node, started after the sidecar stopped)"
        )
        return out
    finally:
        if proxy is not None:
            proxy.stop()
        tansu.stop()

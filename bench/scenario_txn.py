"""Transactional offset commits through the sidecar (issue 29): TxnOffsetCommit round trip, and
the commit-to-visible latency after EndTxn, p50/p99.

One tansu (memory storage) and one sidecar (`--state local`) in front of it, started here. One
raw-protocol client (measuring groupcoord, not a client library) runs N transactions in a row,
each as a transactional producer does: AddOffsetsToTxn (to the transaction coordinator, through
the sidecar), TxnOffsetCommit (answered by the sidecar: checked, sent upstream to the shadow
group, staged, durable), EndTxn(commit); then OffsetFetch(require_stable) until the new offset is
visible. `txn_commit_*`: the TxnOffsetCommit round trip; `visible_*`: from sending EndTxn to the
first OffsetFetch answer showing the offset (EndTxn's own round trip included: its answer is
held until the offsets are settled, so the first fetch after it sees them).
"""

from __future__ import annotations

import asyncio
import importlib
import struct
import time
from datetime import timedelta
from typing import Any

from kio.serial import entity_reader

from bench import servers
from bench.__main__ import Context, Goal, Metric, register
from bench.scenario_sidecar import broker_port, create_topic
from coordinator.sidecar import rewrite

_SIZE = struct.Struct(">i")


def _req(module: str, version: int, cls: str, **fields: Any) -> Any:
    return getattr(importlib.import_module(f"kio.schema.{module}.v{version}.request"), cls)(
        **fields
    )


class Client:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer, self.seq = reader, writer, 0

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection(servers.HOST, port))

    async def call(self, entity: Any) -> Any:
        self.seq += 1
        self.writer.write(rewrite.encode_request(entity, self.seq, "bench-txn"))
        size = _SIZE.unpack(await self.reader.readexactly(4))[0]
        frame = _SIZE.pack(size) + await self.reader.readexactly(size)
        kind = type(entity)
        module = importlib.import_module(kind.__module__.replace(".request", ".response"))
        cls = getattr(module, kind.__name__.replace("Request", "Response"))
        offset = 9 if cls.__flexible__ else 8  # response header v1: an empty tagged-field byte
        return entity_reader(cls)(frame, offset)[0]

    def close(self) -> None:
        self.writer.close()


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


@register(
    "txn",
    "transactional offsets through the sidecar: TxnOffsetCommit, commit-to-visible",
    [
        Metric("txn_commit_p50", "TxnOffsetCommit round trip p50", "ms"),
        Metric("txn_commit_p99", "TxnOffsetCommit round trip p99", "ms"),
        Metric("visible_p50", "EndTxn sent -> offset visible p50", "ms"),
        Metric("visible_p99", "EndTxn sent -> offset visible p99", "ms"),
        Metric("errors", "errors", "count", Goal("<", 1)),
    ],
    serverless=True,
)
async def txn(ctx: Context, _server: object) -> dict[str, float]:
    path = servers.tansu_path()
    if path is None:
        raise RuntimeError("tansu not installed (make peers)")
    count = 100 if ctx.quick else 500
    tansu = servers.start_tansu(path, None)
    proxy: servers.Server | None = None
    try:
        proxy = servers.start_groupcoord(
            None, ["--upstream", f"{servers.HOST}:{tansu.port}", "--state", "local"]
        )
        create_topic(tansu, str(path), "bench-txn")
        broker = await Client.connect(await broker_port(proxy.port))
        group = await Client.connect(proxy.port)
        # tansu answers InitProducerId only after FindCoordinator for the transactional id.
        await broker.call(_req("find_coordinator", 1, "FindCoordinatorRequest", key="bench-txn",
                               key_type=1))  # fmt: skip
        init = await broker.call(_req("init_producer_id", 4, "InitProducerIdRequest",
                                      transactional_id="bench-txn", producer_id=-1,
                                      producer_epoch=-1,
                                      transaction_timeout=timedelta(seconds=60)))  # fmt: skip
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        # Until the sidecar knows the topic (its metadata refresh): a plain commit elsewhere.
        deadline = time.perf_counter() + 10
        while time.perf_counter() < deadline:
            part = _req(
                "offset_commit",
                8,
                "OffsetCommitRequestPartition",
                partition_index=0,
                committed_offset=0,
                committed_leader_epoch=-1,
                committed_metadata="",
            )
            topic = _req(
                "offset_commit", 8, "OffsetCommitRequestTopic", name="bench-txn", partitions=(part,)
            )
            plain = await group.call(_req(
                "offset_commit", 8, "OffsetCommitRequest", group_id="bench-warmup",
                generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
                topics=(topic,)))  # fmt: skip
            if plain.topics[0].partitions[0].error_code == 0:
                break
            await asyncio.sleep(0.05)  # a retry's pace; the loop is bounded by `deadline`
        commit_ms: list[float] = []
        visible_ms: list[float] = []
        errors = 0
        for i in range(1, count + 1):
            ids = {"transactional_id": "bench-txn", "producer_id": pid, "producer_epoch": epoch}
            added = await broker.call(_req("add_offsets_to_txn", 1, "AddOffsetsToTxnRequest",
                                           group_id="bench", **ids))  # fmt: skip
            if added.error_code != 0:
                errors += 1
                ctx.notes.append(f"txn: AddOffsetsToTxn {added.error_code!r}")
            t0 = time.perf_counter()
            answer = await group.call(_req(
                "txn_offset_commit", 3, "TxnOffsetCommitRequest", group_id="bench",
                generation_id=-1, member_id="", group_instance_id=None, **ids, topics=(
                    _req("txn_offset_commit", 3, "TxnOffsetCommitRequestTopic", name="bench-txn",
                         partitions=(_req("txn_offset_commit", 3,
                                          "TxnOffsetCommitRequestPartition", partition_index=0,
                                          committed_offset=i, committed_leader_epoch=-1,
                                          committed_metadata=""),)),)))  # fmt: skip
            commit_ms.append((time.perf_counter() - t0) * 1000)
            codes = {p.error_code for t in answer.topics for p in t.partitions} - {0}
            if codes:
                errors += 1
                ctx.notes.append(f"txn: TxnOffsetCommit {codes!r}")
            t1 = time.perf_counter()
            ended = await broker.call(_req("end_txn", 1, "EndTxnRequest", committed=True, **ids))
            if ended.error_code != 0:
                errors += 1
                ctx.notes.append(f"txn: EndTxn {ended.error_code!r}")
            while True:
                fetched = await group.call(_req(
                    "offset_fetch", 7, "OffsetFetchRequest", group_id="bench", require_stable=True,
                    topics=(_req("offset_fetch", 7, "OffsetFetchRequestTopic", name="bench-txn",
                                 partition_indexes=(0,)),)))  # fmt: skip
                if fetched.topics[0].partitions[0].committed_offset == i:
                    break
                if time.perf_counter() - t1 > 10:
                    errors += 1
                    break
            visible_ms.append((time.perf_counter() - t1) * 1000)
        broker.close()
        group.close()
        return {
            "txn_commit_p50": _pct(commit_ms, 0.5),
            "txn_commit_p99": _pct(commit_ms, 0.99),
            "visible_p50": _pct(visible_ms, 0.5),
            "visible_p99": _pct(visible_ms, 0.99),
            "errors": errors,
        }
    finally:
        if proxy is not None:
            proxy.stop()
        tansu.stop()

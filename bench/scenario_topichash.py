"""Topic hashes (issue 4), in process, no server: 10,000 topics x 32 partitions x 3 racks, 5,000
consumer groups each reading 5 topics (--quick: 1,000 topics, 500 groups).

- Memory: the topic-hash cache plus its topic -> groups index (what groupcoord keeps) against
  per-group rack lists (what Kafka <= 4.0 kept per consumer group: each subscribed topic's id,
  name, partition count and per-partition rack set, seed 002's "strategy 1"), both measured with
  tracemalloc over the same groups.
- Change latency: `GroupCoordinator.topic_changed` for a topic read by the typical number of
  groups, for a topic read by 1,000 groups, and for a topic nobody reads: the time until every
  affected group is in PreparingRebalance. The per-group cost of the hot topic against the
  typical one shows the work is proportional to the groups that read the topic, not to all groups.
- Heartbeat: the check costs a heartbeat nothing by construction (the trigger runs when a topic
  changes, not per heartbeat). Measured: the same heartbeats against a core whose groups are
  indexed with their hashes, and against one where they are not; the difference is the check.
"""

from __future__ import annotations

import gc
import random
import statistics
import struct
import time
import tracemalloc
import uuid
from typing import Any

from bench.__main__ import Context, Goal, Metric, register
from coordinator.core.coordinator import CoordinatorConfig, GroupCoordinator
from coordinator.core.group import ClassicGroup, GroupState, Member
from coordinator.core.messages import Heartbeat, Protocol
from coordinator.core.topics import TopicCatalog, TopicInfo

PARTITIONS = 32
RACKS = ("rack-a", "rack-b", "rack-c")
TOPICS_PER_GROUP = 5
HOT_READERS = 1_000


def subscription(topics: list[str]) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        b = t.encode()
        out += struct.pack(">h", len(b)) + b
    return out + struct.pack(">i", -1)


def build_catalog(n_topics: int) -> TopicCatalog:
    rng = random.Random(1)
    topics = []
    for i in range(n_topics):
        racks = tuple(tuple(rng.sample(RACKS, 3)) for _ in range(PARTITIONS))
        topics.append(TopicInfo(f"topic-{i:05d}", uuid.UUID(int=i + 1), PARTITIONS, racks))
    return TopicCatalog(topics)


def subscriptions(n_topics: int, n_groups: int) -> list[list[str]]:
    """5 topics per group; topic 0 is the hot one, read by HOT_READERS groups."""
    rng = random.Random(2)
    hot = min(HOT_READERS, n_groups)
    out = []
    for g in range(n_groups):
        picks = rng.sample(range(1, n_topics), TOPICS_PER_GROUP)
        if g < hot:
            picks[0] = 0
        out.append([f"topic-{i:05d}" for i in picks])
    return out


def build_core(catalog: TopicCatalog, subs: list[list[str]], track: bool) -> GroupCoordinator:
    core = GroupCoordinator(CoordinatorConfig(), catalog, lambda p: f"{p}-m", 0)
    for g, topics in enumerate(subs):
        gid = f"group-{g:05d}"
        group = ClassicGroup(gid, 0)
        member = Member(
            f"{gid}-m",
            None,
            client_id="c",
            client_host="/h",
            rebalance_timeout_ms=30_000,
            session_timeout_ms=10_000,
            protocol_type="consumer",
            protocols=(Protocol("range", subscription(topics)),),
        )
        group.add(member)
        group.protocol_name = "range"
        group.generation_id = 1
        group.state = GroupState.STABLE
        core.state.groups[gid] = group
        core.state.timers.schedule_session(group, member, 10_000, 0)
        if track:
            core.topic_hashes.track_generation(group)
    return core


def rack_lists(catalog: TopicCatalog, subs: list[list[str]]) -> list[dict[str, Any]]:
    """Kafka <= 4.0: every group keeps its own TopicMetadata per subscribed topic."""
    out = []
    for topics in subs:
        metadata = {}
        for name in topics:
            t = catalog.get(name)
            assert t is not None
            metadata[name] = (
                t.topic_id,
                name,
                t.partitions,
                {p: set(t.partition_racks(p)) for p in range(t.partitions)},
            )
        out.append(metadata)
    return out


def measure_bytes(build: Any) -> tuple[Any, int]:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    value = build()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return value, after - before


def heartbeat_ns(core: GroupCoordinator, subs: list[list[str]], rounds: int) -> float:
    commands = [Heartbeat(f"group-{g:05d}", 1, f"group-{g:05d}-m", None) for g in range(len(subs))]
    heartbeat = core.heartbeat
    samples = []
    for r in range(rounds):
        now = 1_000 + r
        t0 = time.perf_counter_ns()
        for c in commands:
            heartbeat(c, now)
        samples.append((time.perf_counter_ns() - t0) / len(commands))
    return statistics.median(samples)


def change_ms(core: GroupCoordinator, name: str) -> tuple[float, int]:
    info = core.topics.get(name)
    assert info is not None
    t0 = time.perf_counter_ns()
    fx = core.topic_changed(name, info.with_partitions(info.partitions + 4), 1_000)
    elapsed = (time.perf_counter_ns() - t0) / 1e6
    marked = sum(1 for e in fx.events if type(e).__name__ == "GroupMetadataHashChanged")
    return elapsed, marked


@register(
    "topichash",
    "topic hashes: 10,000 topics x 32 partitions x 3 racks, 5,000 groups x 5 topics (in process)",
    [
        Metric("cache_mib", "hash cache + topic->groups index", "MiB"),
        Metric("rack_lists_mib", "per-group rack lists (Kafka <= 4.0)", "MiB"),
        Metric("memory_ratio", "rack lists / cache", "x"),
        Metric("change_typical_us", "topic change -> readers marked (typical topic)", "us"),
        Metric("typical_readers", "groups reading the typical topic", "groups"),
        Metric("change_hot_ms", "topic change -> 1,000 readers marked", "ms"),
        Metric("change_per_group_us", "hot topic: cost per affected group", "us"),
        Metric("change_unread_us", "topic nobody reads (all groups present)", "us"),
        Metric("heartbeat_ns", "heartbeat, groups indexed", "ns"),
        Metric("heartbeat_check_ns", "heartbeat cost of the check", "ns", Goal("<", 1000)),
    ],
    serverless=True,
)
async def run(ctx: Context, server: object) -> dict[str, float]:
    n_topics, n_groups = (1_000, 500) if ctx.quick else (10_000, 5_000)
    catalog = build_catalog(n_topics)
    subs = subscriptions(n_topics, n_groups)
    if ctx.quick:
        ctx.notes.append(f"topichash --quick: {n_topics} topics, {n_groups} groups")

    # Memory: build the indexed core, then fill the cache (every group's hash computed once).
    core, _ = measure_bytes(lambda: build_core(catalog, subs, track=False))

    def fill() -> None:
        for group in core.state.groups.values():
            core.topic_hashes.track_generation(group)

    _, cache_bytes = measure_bytes(fill)
    _, lists_bytes = measure_bytes(lambda: rack_lists(catalog, subs))

    # Heartbeats: indexed vs not (same code path; the difference is noise around zero).
    plain = build_core(catalog, subs, track=False)
    rounds = 5 if ctx.quick else 20
    with_ns = heartbeat_ns(core, subs, rounds)
    without_ns = heartbeat_ns(plain, subs, rounds)

    # Topic changes: a typical topic (few readers), the hot one, and one nobody reads.
    readers = {name: len(core.topic_hashes.readers(name)) for name in (t.name for t in catalog)}
    typical = next(n for n, r in readers.items() if r == max(1, round(statistics.median(
        [r for r in readers.values() if r]))))  # fmt: skip
    unread = next(n for n, r in readers.items() if r == 0)
    # Each on a fresh core: a group already rebalancing is (rightly) not marked again.
    typical_ms, typical_marked = change_ms(core, typical)
    hot_ms, hot_marked = change_ms(build_core(catalog, subs, track=True), "topic-00000")
    unread_ms, _ = change_ms(build_core(catalog, subs, track=True), unread)
    assert typical_marked == readers[typical] and hot_marked == readers["topic-00000"]
    return {
        "cache_mib": cache_bytes / 2**20,
        "rack_lists_mib": lists_bytes / 2**20,
        "memory_ratio": lists_bytes / max(cache_bytes, 1),
        "change_typical_us": typical_ms * 1000,
        "typical_readers": float(readers[typical]),
        "change_hot_ms": hot_ms,
        "change_per_group_us": hot_ms * 1000 / max(hot_marked, 1),
        "change_unread_us": unread_ms * 1000,
        "heartbeat_ns": with_ns,
        "heartbeat_check_ns": max(0.0, with_ns - without_ns),
    }

"""Prometheus metrics: fed from the core's events, the server's counters and the log's hooks.

Three sources, chosen by what each costs on the hot path:
- Events (core.events) arrive through `Server.event_sinks`; `Metrics.on_event` turns them
  into counters and histograms (rebalances by cause and their phases, joins, leaves, offsets).
  prometheus children are looked up once (`labels()` costs ~0.7 µs) and kept in dicts.
- Requests are counted by the server into `RequestStats`: plain ints and bucket lists, no lock and
  no prometheus call per request, so a heartbeat pays a few hundred nanoseconds (the issue's
  budget is < 10% of heartbeat throughput). They are exported at scrape time.
- Everything that is a level (groups by state, members, connections, the log's size and segments,
  the topic-hash cache) is read at scrape time by `_StateCollector`; so is a sidecar fleet's
  document (`Server.fleet_status`: state partitions by status, their load times, the fleet
  group's generation and rebalances, compaction-hole repairs), when the server is in a fleet.

Invariants:
- Everything here runs on the event loop thread (the HTTP server in serve.http shares the
  loop), so scrape-time reads of the core never race its mutations. The one exception is the fsync
  histogram, observed from the log's I/O thread (prometheus-client's histogram is thread-safe).
- Labels are bounded (STYLE.md): api, error, cause, reason, state, protocol_type, a fleet's
  partition status and state partition number (at most the state topic's partition count).
  Series naming a group exist only with `per_group=True` (`--metrics-per-group`): group ids are
  unbounded.
- The core never imports this module.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Sized
from platform import python_version
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from prometheus_client import CollectorRegistry, Counter, Histogram, Info, disable_created_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from coordinator.core.consumer.messages import ConsumerGroupDescribeResult
from coordinator.core.effects import AnyResult
from coordinator.core.events import (
    TOPIC_CAUSES,
    Event,
    GroupCreated,
    GroupDeleted,
    JoinPhaseCompleted,
    LeaveReason,
    MemberJoined,
    MemberLeft,
    OffsetsCommitted,
    OffsetsDeleted,
    OffsetsExpired,
    RebalanceCause,
    RebalanceCompleted,
    RebalanceStarted,
)
from coordinator.core.group import GroupState
from coordinator.core.messages import (
    DeleteGroupsResult,
    DescribeGroupsResult,
    Heartbeat,
    HeartbeatResult,
    OffsetCommitResult,
    OffsetDeleteResult,
    OffsetFetchResult,
    TopicErrors,
)
from coordinator.serve import share_metrics
from coordinator.serve.lifecycle import installed_version
from protocol import apis

if TYPE_CHECKING:
    from coordinator.core.coordinator import GroupCoordinator
    from coordinator.serve.runtime import EventSink, Runtime
    from coordinator.serve.topic_service import TopicService


class Server(Protocol):
    """What the metrics read of the server (coordinator.serve.server.Server is one). `stats` is the
    one thing written: `install` hands the server its RequestStats."""

    stats: RequestStats | None
    heartbeats: int
    protocol_errors: int
    connections_accepted: int

    @property
    def core(self) -> GroupCoordinator: ...

    @property
    def journal(self) -> object: ...

    @property
    def event_sinks(self) -> list[EventSink]: ...

    @property
    def connections(self) -> Sized: ...

    @property
    def topic_service(self) -> TopicService: ...


NS = 1_000_000_000

# Request latency: from 100 µs (a heartbeat) to minutes (a JoinGroup parked for the rebalance).
REQUEST_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
    0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
)  # fmt: skip
REQUEST_BOUNDS_NS = tuple(round(b * NS) for b in REQUEST_BUCKETS_S)
# Rebalances: the initial delay is 3 s by default, the rebalance timeout up to minutes.
REBALANCE_BUCKETS_S = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
)  # fmt: skip
FSYNC_BUCKETS_S = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0,
)  # fmt: skip


def api_name(api_key: int) -> str:
    """Kafka's request name (JoinGroup, OffsetCommit, ...), as its JMX metrics spell it: for the
    APIs groupcoord serves and every other API Kafka defines (kio's table); a number otherwise."""
    spec = apis.APIS.get(api_key)
    name = spec.name if spec is not None else api_key_map.get(api_key)
    if name is None:
        return str(api_key)
    return "".join(part.capitalize() for part in name.split("_"))


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def result_error(result: AnyResult) -> int:
    """The error code a request's answer reports at the top: the request's own error, or for the
    batched answers (per partition or per group) the first one that is not NONE."""
    if type(result) is OffsetCommitResult:  # the hot one, first: it has no `error` to look up
        return _first_partition_error(result.topics)
    error = getattr(result, "error", None)
    if isinstance(error, int) and error:
        return error
    match result:
        case OffsetDeleteResult():
            return _first_partition_error(result.topics)
        case OffsetFetchResult():
            return next((g.error for g in result.groups if g.error), 0)
        case DescribeGroupsResult():
            return next((g.error for g in result.groups if g.error), 0)
        case DeleteGroupsResult():
            return next((g.error for g in result.results if g.error), 0)
        case ConsumerGroupDescribeResult():
            return next((g.error for g in result.groups if g.error), 0)
    return 0


def _first_partition_error(topics: tuple[TopicErrors, ...]) -> int:
    for topic in topics:
        for partition in topic.partitions:
            if partition.error:
                return partition.error
    return 0


HEARTBEAT_SAMPLE_MASK = 15
"""A heartbeat is timed when the server's heartbeat count & this mask == 0: one in 16."""


class RequestStats:
    """Per-request counters the server updates inline: plain ints, no locks, loop thread only.

    `done(api_key, error, t0)` is called when a response is written; `t0` is `clock()`
    (perf_counter_ns) when the request was decoded, so parked requests (JoinGroup, SyncGroup) and
    replies held for the fsync count their waiting time too.

    Heartbeats, most of the traffic, cost less: the server counts them in a plain int
    (`Server.heartbeats`), `heartbeat` counts only errors other than NONE, and times one heartbeat
    in 16 (the time the coordinator takes to answer it; a heartbeat is answered synchronously, so
    that is its whole time in the server). The Heartbeat histogram is therefore a sample: its
    quantiles hold, its `_count` is about 1/16 of the heartbeats (`groupcoord_heartbeats_total` and
    `groupcoord_requests_total` have the exact numbers).
    """

    __slots__ = ("buckets", "counts", "heartbeat_errors", "sums_ns")

    clock = staticmethod(perf_counter_ns)

    def __init__(self) -> None:
        self.counts: dict[int, dict[int, int]] = {}  # api_key -> error code -> requests
        self.buckets: dict[int, list[int]] = {}  # api_key -> count per latency bucket (+Inf last)
        self.sums_ns: dict[int, int] = {}
        self.heartbeat_errors: dict[int, int] = {}  # error code (never NONE) -> heartbeats
        # Every API the server answers has its series from the start (at 0): a rate() over a
        # series that appears only at its first request misses that request, and a dashboard
        # cannot tell "no Fetch yet" from "Fetch not counted".
        for api_key in apis.APIS:
            self._api(api_key)

    def _api(self, api_key: int) -> dict[int, int]:
        counts = self.counts.get(api_key)
        if counts is None:
            counts = self.counts[api_key] = {}
            self.buckets[api_key] = [0] * (len(REQUEST_BOUNDS_NS) + 1)
            self.sums_ns[api_key] = 0
        return counts

    def done(self, api_key: int, error: int, t0_ns: int) -> None:
        ns = perf_counter_ns() - t0_ns
        counts = self.counts.get(api_key)
        if counts is None:
            counts = self._api(api_key)
        counts[error] = counts.get(error, 0) + 1
        self.buckets[api_key][bisect_left(REQUEST_BOUNDS_NS, ns)] += 1
        self.sums_ns[api_key] += ns

    def answered(self, api_key: int, result: AnyResult, t0_ns: int) -> None:
        """`done` for a result of the core: its error is the top-level one (`result_error`)."""
        self.done(api_key, result_error(result), t0_ns)

    def heartbeat(self, runtime: Runtime, command: Heartbeat, seq: int) -> HeartbeatResult:
        """`runtime.heartbeat(command)`, counted; `seq` is the server's heartbeat count."""
        if seq & HEARTBEAT_SAMPLE_MASK:
            result = runtime.heartbeat(command)
        else:
            t0 = perf_counter_ns()
            result = runtime.heartbeat(command)
            ns = perf_counter_ns() - t0
            self.buckets[apis.HEARTBEAT][bisect_left(REQUEST_BOUNDS_NS, ns)] += 1
            self.sums_ns[apis.HEARTBEAT] += ns
        error = result.error
        if error:
            errors = self.heartbeat_errors
            errors[error] = errors.get(error, 0) + 1
        return result

    def total(self, api_key: int) -> int:
        return sum(self.counts.get(api_key, {}).values())

    def not_answered_here(self, api_keys: Iterable[int]) -> None:
        """Drop the (still empty) series of APIs this server forwards instead of answering
        (sidecar mode: Produce, Fetch, ... go upstream, counted as groupcoord_upstream_*)."""
        for api_key in api_keys:
            if not self.counts.get(api_key, True):
                del self.counts[api_key], self.buckets[api_key], self.sums_ns[api_key]


def cumulative_buckets(counts: list[int], bounds_s: Iterable[float]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    running = 0
    for bound, n in zip(bounds_s, counts, strict=False):
        running += n
        out.append((repr(float(bound)), running))
    out.append(("+Inf", running + counts[-1]))
    return out


_PROTOCOL_TYPES = {"consumer": "consumer", "connect": "connect", "": "none"}


def protocol_type_label(protocol_type: str) -> str:
    """Clients choose the protocol type: keep the label bounded."""
    return _PROTOCOL_TYPES.get(protocol_type, "other")


class Metrics:
    """The registry and the event-fed metrics of one server. Create with `install`."""

    def __init__(self, server: Server, *, per_group: bool = False) -> None:
        self.server = server
        self.per_group = per_group
        self.stats = RequestStats()
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # What runs, as Kafka's app-info MBean: groupcoord_build_info{version="0.1.0",...} 1
        build = {"version": installed_version(), "kio": installed_version("kio")}
        Info("groupcoord_build", "What runs", registry=r).info(build | {"python": python_version()})
        self.rebalances = Counter(
            "groupcoord_rebalances",
            "Rebalances started (the group entered PreparingRebalance), by cause",
            ["cause"],
            registry=r,
        )
        self.rebalances_completed = Counter(
            "groupcoord_rebalances_completed",
            "Rebalances that reached Stable (or Empty), by the cause that started them",
            ["cause"],
            registry=r,
        )
        self.rebalance_duration = Histogram(
            "groupcoord_rebalance_duration_seconds",
            "PreparingRebalance entered -> Stable (or Empty); one observation per rebalance",
            buckets=REBALANCE_BUCKETS_S,
            registry=r,
        )
        self.join_phase = Histogram(
            "groupcoord_rebalance_join_phase_seconds",
            "PreparingRebalance entered -> join phase completed (JoinGroup responses sent)",
            buckets=REBALANCE_BUCKETS_S,
            registry=r,
        )
        self.sync_phase = Histogram(
            "groupcoord_rebalance_sync_phase_seconds",
            "Join phase completed -> Stable (the leader's assignment arrived)",
            buckets=REBALANCE_BUCKETS_S,
            registry=r,
        )
        self.topic_hash_rebalances = Counter(
            "groupcoord_topic_hash_rebalances",
            "Rebalances started because a subscribed topic's hash changed (KIP-1101)",
            registry=r,
        )
        self.joins = Counter("groupcoord_member_joins", "Members added to a group", registry=r)
        self.leaves = Counter(
            "groupcoord_member_leaves", "Members removed from a group, by reason", ["reason"],
            registry=r,
        )  # fmt: skip
        self.expirations = Counter(
            "groupcoord_session_expirations",
            "Members removed because their session timed out",
            registry=r,
        )
        self.fencings = Counter(
            "groupcoord_member_fencings",
            "Static members fenced by a newer instance with the same group.instance.id (KIP-345)",
            registry=r,
        )
        self.groups_created = Counter("groupcoord_groups_created", "Groups created", registry=r)
        self.groups_deleted = Counter(
            "groupcoord_groups_deleted", "Groups deleted (DeleteGroups or retention)", registry=r
        )
        # A plain int, collected at scrape: Counter.inc takes a lock, ~2% of the loop's time at
        # 14k one-partition commits/s (py-spy, bench `commit`); heartbeats are counted the same way.
        self.offsets_committed = 0
        self.deletions = Counter(
            "groupcoord_offset_deletions", "Offsets deleted by OffsetDelete", registry=r
        )
        self.expired = Counter(
            "groupcoord_offset_expirations", "Offsets removed by retention", registry=r
        )
        self.fsync = Histogram(
            "groupcoord_log_fsync_seconds",
            "fsync latency of the group log",
            buckets=FSYNC_BUCKETS_S,
            registry=r,
        )
        self._by_cause = {c: self.rebalances.labels(c.value) for c in RebalanceCause}
        self._completed_by_cause = {
            c: self.rebalances_completed.labels(c.value) for c in RebalanceCause
        }
        self._by_reason = {reason: self.leaves.labels(reason.value) for reason in LeaveReason}
        self.last_rebalance_s: dict[str, float] = {}  # per group, only with per_group
        # The history recorder (coordinator.serve.history.HistoryRecorder), when the history is
        # on: its counters (plain ints) are read at scrape time.
        self.history: Any = None
        self._handlers: dict[type, Callable[[Any], None]] = {
            GroupCreated: lambda e: self.groups_created.inc(),
            GroupDeleted: self._group_deleted,
            MemberJoined: lambda e: self.joins.inc(),
            MemberLeft: self._member_left,
            RebalanceStarted: self._rebalance_started,
            JoinPhaseCompleted: self._join_completed,
            RebalanceCompleted: self._rebalance_completed,
            OffsetsCommitted: self._offsets_committed,
            OffsetsDeleted: lambda e: self.deletions.inc(e.partitions),
            OffsetsExpired: lambda e: self.expired.inc(e.partitions),
        }
        r.register(_StateCollector(self))
        for collector in (ProcessCollector, PlatformCollector, GCCollector):
            collector(registry=r)

    # -- events ----------------------------------------------------------------------------------

    def on_event(self, event: Event) -> None:
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _offsets_committed(self, event: OffsetsCommitted) -> None:
        self.offsets_committed += event.partitions

    def _group_deleted(self, event: GroupDeleted) -> None:
        self.groups_deleted.inc()
        self.last_rebalance_s.pop(event.group_id, None)

    def _member_left(self, event: MemberLeft) -> None:
        self._by_reason[event.reason].inc()
        if event.reason is LeaveReason.EXPIRED:
            self.expirations.inc()
        elif event.reason is LeaveReason.FENCED:
            self.fencings.inc()

    def _rebalance_started(self, event: RebalanceStarted) -> None:
        self._by_cause[event.cause].inc()
        if event.cause in TOPIC_CAUSES:
            self.topic_hash_rebalances.inc()

    def _join_completed(self, event: JoinPhaseCompleted) -> None:
        self.join_phase.observe((event.now_ms - event.started_ms) / 1000)

    def _rebalance_completed(self, event: RebalanceCompleted) -> None:
        seconds = (event.now_ms - event.started_ms) / 1000
        self._completed_by_cause[event.cause].inc()
        self.rebalance_duration.observe(seconds)
        if event.members:  # an Empty group has no sync phase
            self.sync_phase.observe((event.now_ms - event.join_completed_ms) / 1000)
        if self.per_group:
            self.last_rebalance_s[event.group_id] = seconds

    # -- the log's hook (runs on the log's I/O thread) -------------------------------------------

    def observe_fsync(self, seconds: float) -> None:
        self.fsync.observe(seconds)


def install(server: Server, *, per_group: bool = False) -> Metrics:
    """Attach metrics to a server (before or after `start`): its event sink, its request stats,
    the log's fsync hook. Returns the Metrics, whose `registry` the HTTP endpoint exposes."""
    # The `_created` series double the output and no query needs them.
    disable_created_metrics()  # type: ignore[no-untyped-call]
    metrics = Metrics(server, per_group=per_group)
    server.event_sinks.append(metrics.on_event)
    server.stats = metrics.stats
    disk = _disk(server)
    if disk is not None and hasattr(disk, "on_fsync"):
        disk.on_fsync = metrics.observe_fsync
    return metrics


def _disk(server: Server) -> Any:
    return getattr(server.journal, "disk", None)


def _topic_hash_cache(server: Server) -> Any:
    """The core's topic-hash cache (coordinator.core.topichash, KIP-1101), if this core has one."""
    return getattr(server.core, "topic_hashes", None)


def _int_attr(obj: Any, *names: str) -> int | None:
    for name in names:
        value = getattr(obj, name, None)
        if callable(value):
            value = value()
        if isinstance(value, int):
            return value
    return None


class _StateCollector:
    """Scrape-time reads: request stats, connections, groups, the log, the topic-hash cache."""

    def __init__(self, metrics: Metrics) -> None:
        self.m = metrics
        self._fleet = _FleetCollector()

    def describe(self) -> list[Metric]:
        return []  # unchecked collector: families depend on what the server has

    def collect(self) -> Iterator[Metric]:
        yield from self._requests()
        yield from self._connections()
        yield from self._groups()
        yield from self._log()
        yield from self._topic_hashes()
        yield from self._history()
        yield from self._fleet.collect(getattr(self.m.server, "fleet_status", None))
        if self.m.per_group:
            yield from self._per_group()

    def _requests(self) -> Iterator[Metric]:
        stats = self.m.stats
        requests = CounterMetricFamily(
            "groupcoord_requests",
            "Requests answered, by API and error code",
            labels=["api", "error"],
        )
        duration = HistogramMetricFamily(
            "groupcoord_request_duration_seconds",
            "Request arrival -> response written (parked and fsync waits included)",
            labels=["api"],
        )
        heartbeats = self.m.server.heartbeats
        for api_key in sorted(stats.counts):
            name = api_name(api_key)
            counts = stats.counts[api_key]
            if api_key == apis.HEARTBEAT:  # the server counts them all; stats only the errors
                counts = dict(stats.heartbeat_errors)
                counts[0] = heartbeats - sum(counts.values())
            for error, n in sorted(counts.items()) or [(0, 0)]:
                requests.add_metric([name, error_name(error)], n)
            duration.add_metric(
                [name],
                cumulative_buckets(stats.buckets[api_key], REQUEST_BUCKETS_S),
                stats.sums_ns[api_key] / NS,
            )
        yield requests
        yield duration
        yield CounterMetricFamily(
            "groupcoord_heartbeats",
            "Heartbeat requests answered",
            value=heartbeats,
        )
        yield CounterMetricFamily(
            "groupcoord_offset_commits",
            "Offsets (partitions) committed",
            value=self.m.offsets_committed,
        )
        yield CounterMetricFamily(
            "groupcoord_offset_fetches",
            "OffsetFetch requests answered",
            value=stats.total(apis.OFFSET_FETCH),
        )

    def _connections(self) -> Iterator[Metric]:
        server = self.m.server
        yield GaugeMetricFamily(
            "groupcoord_connections", "Open client connections", value=len(server.connections)
        )
        yield CounterMetricFamily(
            "groupcoord_connections_accepted",
            "Client connections accepted",
            value=getattr(server, "connections_accepted", 0),
        )
        yield CounterMetricFamily(
            "groupcoord_connections_protocol_errors",
            "Connections closed for a protocol error (bad framing, unsupported API, bad body)",
            value=server.protocol_errors,
        )
        signal = server.topic_service.signal
        family = CounterMetricFamily(
            "groupcoord_topic_signal_answers",
            "Fetch/ListOffsets topics answered for the client by the topic-change signal: "
            "stale_metadata (NOT_LEADER_OR_FOLLOWER until it re-reads the topic) or topic_gone "
            "(UNKNOWN_TOPIC_OR_PARTITION for a deleted topic)",
            labels=["why"],
        )
        for why, n in sorted(signal.answered.items()):
            family.add_metric([why], n)
        yield family

    def _groups(self) -> Iterator[Metric]:
        counts: dict[tuple[str, str], int] = {}
        for known in GroupState:
            counts[known.value, "consumer"] = 0
        members = static = pending = 0
        for _, state, ptype, _, n_members, n_static, n_pending in self.m.server.core.group_counts():
            key = (state, protocol_type_label(ptype))
            counts[key] = counts.get(key, 0) + 1
            members += n_members
            static += n_static
            pending += n_pending
        family = GaugeMetricFamily(
            "groupcoord_groups",
            "Groups by state and protocol type",
            labels=["state", "protocol_type"],
        )
        for (state, ptype), n in sorted(counts.items()):
            family.add_metric([state, ptype], n)
        yield family
        yield GaugeMetricFamily("groupcoord_members", "Members of all groups", value=members)
        yield GaugeMetricFamily(
            "groupcoord_static_members", "Members with a group.instance.id (KIP-345)", value=static
        )
        yield GaugeMetricFamily(
            "groupcoord_pending_members",
            "Member ids handed out with MEMBER_ID_REQUIRED, not yet joined (KIP-394)",
            value=pending,
        )
        yield from self._consumer_groups()
        core = self.m.server.core  # KIP-932 share groups (coordinator.serve.share_metrics)
        yield from share_metrics.collect(core.share, core.topics, self.m.per_group)

    def _consumer_groups(self) -> Iterator[Metric]:
        """The KIP-848 consumer groups (issue 23): by state, and their members."""
        groups = self.m.server.core.consumer.groups
        counts = dict.fromkeys(("Empty", "Assigning", "Reconciling", "Stable"), 0)
        members = 0
        for group in list(groups.values()):
            state = group.state.value
            counts[state] = counts.get(state, 0) + 1
            members += len(group.members)
        family = GaugeMetricFamily(
            "groupcoord_consumer_groups",
            "KIP-848 consumer groups (group.protocol=consumer) by state",
            labels=["state"],
        )
        for state, n in sorted(counts.items()):
            family.add_metric([state], n)
        yield family
        yield GaugeMetricFamily(
            "groupcoord_consumer_group_members",
            "Members of the KIP-848 consumer groups",
            value=members,
        )

    def _log(self) -> Iterator[Metric]:
        server = self.m.server
        load = getattr(server, "load_seconds", None)
        if load is not None:
            yield GaugeMetricFamily(
                "groupcoord_log_load_seconds",
                "Time the last start-up (or reload) took to replay the log",
                value=load,
            )
        disk = _disk(server)
        if disk is None:
            return
        for name, doc, attr in (
            ("groupcoord_log_appends", "Append batches", "appends"),
            ("groupcoord_log_appended_records", "Records appended", "appended_records"),
            ("groupcoord_log_appended_bytes", "Bytes appended (entry framing included)",
             "appended_bytes"),
            ("groupcoord_log_fsyncs", "fsyncs of segment files", "fsync_count"),
            ("groupcoord_log_compactions", "Compactions completed", "compactions"),
            ("groupcoord_log_compaction_reclaimed_bytes", "Bytes freed by compaction",
             "reclaimed_bytes"),
        ):  # fmt: skip
            value = _int_attr(disk, attr)
            if value is not None:
                yield CounterMetricFamily(name, doc, value=value)
        for name, doc, attr in (
            ("groupcoord_log_segments", "Segment files", "segment_count"),
            ("groupcoord_log_size_bytes", "Bytes of all segments on disk", "size_bytes"),
        ):
            value = _int_attr(disk, attr)
            if value is not None:
                yield GaugeMetricFamily(name, doc, value=value)
        healthy = getattr(disk, "healthy", None)
        if isinstance(healthy, bool):
            yield GaugeMetricFamily(
                "groupcoord_log_healthy",
                "1 while the log accepts appends; 0 after a write failure until it recovers",
                value=int(healthy),
            )

    def _topic_hashes(self) -> Iterator[Metric]:
        cache = _topic_hash_cache(self.m.server)
        if cache is None:
            return
        entries = _int_attr(cache, "entries", "size")
        if entries is None and hasattr(cache, "__len__"):
            entries = len(cache)
        if entries is not None:
            yield GaugeMetricFamily(
                "groupcoord_topic_hash_cache_entries", "Topics with a cached hash", value=entries
            )
        for name, doc, attrs in (
            ("groupcoord_topic_hash_cache_hits", "Topic-hash lookups answered from the cache",
             ("hits",)),
            ("groupcoord_topic_hash_cache_misses", "Topic-hash lookups that computed the hash",
             ("misses",)),
            ("groupcoord_topic_hash_recomputations", "Hashes recomputed after a topic changed",
             ("recomputations", "recomputes")),
        ):  # fmt: skip
            value = _int_attr(cache, *attrs)
            if value is not None:
                yield CounterMetricFamily(name, doc, value=value)

    def _history(self) -> Iterator[Metric]:
        recorder = self.m.history
        if recorder is None:
            return
        for name, doc, attr in (
            ("groupcoord_history_dropped_events", "Events not recorded in the history because "
             "its queue was full (the disk slower than the events); group state is unaffected",
             "dropped"),
            ("groupcoord_history_lost_entries", "History entries lost to a failed write",
             "lost"),
            ("groupcoord_history_write_errors", "Failed writes of the history log",
             "write_errors"),
            ("groupcoord_history_written_entries", "Entries written to the history log",
             "written"),
        ):  # fmt: skip
            value = _int_attr(recorder, attr)
            if value is not None:
                yield CounterMetricFamily(name, doc, value=value)

    def _per_group(self) -> Iterator[Metric]:
        core = self.m.server.core
        state = GaugeMetricFamily(
            "groupcoord_group_state", "1 for the group's current state", labels=["group", "state"]
        )
        generation = GaugeMetricFamily(
            "groupcoord_group_generation", "The group's generation_id", labels=["group"]
        )
        members = GaugeMetricFamily("groupcoord_group_members", "Members", labels=["group"])
        last = GaugeMetricFamily(
            "groupcoord_group_last_rebalance_seconds",
            "Duration of the group's last completed rebalance",
            labels=["group"],
        )
        offsets = GaugeMetricFamily(
            "groupcoord_group_committed_offset",
            "Committed offset",
            labels=["group", "topic", "partition"],
        )
        durations = self.m.last_rebalance_s
        for gid, group_state, _, generation_id, n_members, _, _ in core.group_counts():
            state.add_metric([gid, group_state], 1)
            generation.add_metric([gid], generation_id)
            members.add_metric([gid], n_members)
            seconds = durations.get(gid)
            if seconds is not None:
                last.add_metric([gid], seconds)
        for gid in core.offset_group_ids():
            for (topic, partition), value in core.committed_offsets(gid).items():
                offsets.add_metric([gid, topic, str(partition)], value.offset)
        yield from (state, generation, members, last, offsets)


# A state partition's statuses (coordinator.sidecar.fleet.Part.status), as status.FLEET_STATUSES
# spells them; not imported from there: status imports the server, which imports this module.
FLEET_STATUSES = ("serving", "loading", "remote", "fenced", "unassigned")


class _FleetCollector:
    """A sidecar fleet's series, read from its /fleet document at scrape time.

    `groupcoord_fleet_repaired_keys_total` must not go down when a partition's writer is replaced
    (a move, a reload): the document gives each partition's current writer's count, so the
    total adds what each partition's count grew by since the last scrape, and a new writer's
    whole count (its `loaded_at` changed, or the count went down)."""

    def __init__(self) -> None:
        self._repaired_total = 0
        self._repaired_seen: dict[int, tuple[float | None, int]] = {}  # p -> (loaded_at, count)
        self._partition_labels: dict[int, list[str]] = {}  # bounded by the partition count

    def collect(self, fleet_status: Callable[[], dict[str, Any]] | None) -> Iterator[Metric]:
        if fleet_status is None:
            return
        fleet = fleet_status()
        parts = fleet["partitions"]
        counts = dict.fromkeys(FLEET_STATUSES, 0)
        load = GaugeMetricFamily(
            "groupcoord_fleet_partition_load_seconds",
            "Time this member took to load a state partition it serves (claim, read to the end)",
            labels=["partition"],
        )
        for part in parts:
            status = part["status"]
            counts[status if status in counts else "unassigned"] += 1
            if status == "serving" and part["load_seconds"] is not None:
                load.add_metric(self._label(part["partition"]), part["load_seconds"])
            self._repaired(part)
        family = GaugeMetricFamily(
            "groupcoord_fleet_partitions",
            "State partitions by status as this member sees them: serving (here), loading "
            "(here), remote (another member), fenced, unassigned",
            labels=["status"],
        )
        for status, n in counts.items():
            family.add_metric([status], n)
        yield family
        yield load
        yield GaugeMetricFamily(
            "groupcoord_fleet_members", "Members of the fleet", value=len(fleet["members"])
        )
        yield GaugeMetricFamily(
            "groupcoord_fleet_generation",
            "The fleet group's generation on the upstream (the epoch of this member's claims)",
            value=fleet["generation"],
        )
        yield CounterMetricFamily(
            "groupcoord_fleet_rebalances",
            "Fleet group assignments this member received (each may move state partitions)",
            value=fleet["rebalances"],
        )
        yield CounterMetricFamily(
            "groupcoord_fleet_repaired_keys",
            "Keys rewritten with their valid value after a former owner's late write (the "
            "compaction hole), in the partitions this member served",
            value=self._repaired_total,
        )

    def _label(self, partition: int) -> list[str]:
        label = self._partition_labels.get(partition)
        if label is None:
            label = self._partition_labels[partition] = [str(partition)]
        return label

    def _repaired(self, part: dict[str, Any]) -> None:
        p, count, loaded_at = part["partition"], part["repaired_keys"], part["loaded_at"]
        seen = self._repaired_seen.get(p)
        if seen is not None and seen[0] == loaded_at and count >= seen[1]:
            self._repaired_total += count - seen[1]
        else:
            self._repaired_total += count  # a new writer (or the first scrape)
        self._repaired_seen[p] = (loaded_at, count)

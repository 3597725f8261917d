"""Sidecar mode's upstream traffic: what is forwarded, how fast the upstream answers, whether it is
reachable. Counted inline as plain ints, exported at scrape time.

Why plain ints and not prometheus children: a forwarded request is counted twice (sent, answered),
and prometheus-client's `inc`/`observe` take a lock each (~0.3 µs with the child already looked
up). `ApiTraffic` is looked up once per request (`UpstreamStats.sent`) and travels with the
request through the upstream link (coordinator.sidecar.upstream.Link), so the answer is counted
without a second lookup. The same reasoning as coordinator.serve.metrics.RequestStats.

Invariants:
- Loop thread only; the collector reads at scrape time on the same loop (the HTTP server shares
  it), so no read races a write.
- Labels are bounded: `api` is Kafka's API name for the API keys Kafka defines, `other` for
  anything else a client might send; `broker` is an upstream broker's host:port (the cluster's
  size).
- Only what clients send through the sidecar is counted; the sidecar's own requests (metadata
  refresh, lag measurement) are not "forwarded" and are not counted here.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from time import perf_counter_ns
from typing import Any

from kio.schema.index import api_key_map
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from coordinator.serve.metrics import (
    NS,
    REQUEST_BOUNDS_NS,
    REQUEST_BUCKETS_S,
    api_name,
    cumulative_buckets,
)
from protocol import apis

OTHER_API = -1  # an API key Kafka does not define: one series for all of them


class ApiTraffic:
    """One API's forwarded requests: counts, bytes each way, upstream latency buckets."""

    __slots__ = ("buckets", "request_bytes", "requests", "response_bytes", "responses", "sum_ns")

    def __init__(self) -> None:
        self.requests = 0
        self.request_bytes = 0
        self.responses = 0
        self.response_bytes = 0
        self.buckets = [0] * (len(REQUEST_BOUNDS_NS) + 1)  # +Inf last
        self.sum_ns = 0

    def answered(self, nbytes: int, t0_ns: int) -> None:
        """Its response (`nbytes` on the wire) arrived; `t0_ns` is when the request was sent."""
        ns = perf_counter_ns() - t0_ns
        self.responses += 1
        self.response_bytes += nbytes
        self.buckets[bisect_left(REQUEST_BOUNDS_NS, ns)] += 1
        self.sum_ns += ns


class UpstreamStats:
    """Forwarded requests by API key. `sent` is called as a request goes upstream; the returned
    ApiTraffic's `answered` when its response comes back."""

    __slots__ = ("apis",)

    clock = staticmethod(perf_counter_ns)

    def __init__(self) -> None:
        self.apis: dict[int, ApiTraffic] = {}

    def sent(self, api_key: int, nbytes: int) -> ApiTraffic:
        traffic = self.apis.get(api_key)
        if traffic is None:
            traffic = self._new(api_key)
        traffic.requests += 1
        traffic.request_bytes += nbytes
        return traffic

    def _new(self, api_key: int) -> ApiTraffic:
        if api_key not in api_key_map and api_key not in apis.APIS:
            api_key = OTHER_API
            traffic = self.apis.get(api_key)
            if traffic is not None:
                return traffic
        traffic = self.apis[api_key] = ApiTraffic()
        return traffic


def _label(api_key: int) -> str:
    return "other" if api_key == OTHER_API else api_name(api_key)


class UpstreamCollector:
    """The sidecar's upstream series (a prometheus_client custom collector). `sidecar` is the
    coordinator.sidecar.proxy.Sidecar (read duck-typed: this module is imported by it)."""

    def __init__(self, sidecar: Any) -> None:
        self._sidecar = sidecar

    def describe(self) -> list[Metric]:
        return []  # unchecked: the families depend on the traffic seen

    def collect(self) -> Iterator[Metric]:
        sidecar = self._sidecar
        upstreams = sidecar.upstreams
        yield GaugeMetricFamily(
            "groupcoord_upstream_up",
            "1 while the upstream cluster answers the sidecar's metadata refreshes; 0 before the "
            "first answer and while it is unreachable",
            value=int(getattr(sidecar, "upstream_answered", None) is True),
        )
        brokers = GaugeMetricFamily(
            "groupcoord_upstream_broker_up",
            "Per upstream broker (bootstrap address or one named by Metadata): 0 while "
            "connecting to it fails (in reconnect backoff), 1 otherwise",
            labels=["broker"],
        )
        seen: set[str] = set()
        for broker in [*upstreams.bootstrap, *upstreams.brokers.values()]:
            address = f"{broker.host}:{broker.port}"
            if address not in seen:
                seen.add(address)
                brokers.add_metric([address], int(broker.reachable))
        yield brokers
        yield from _traffic(upstreams.stats)
        peers = getattr(sidecar, "peer_links", None)
        if peers is not None:
            yield CounterMetricFamily(
                "groupcoord_fleet_forwarded_requests",
                "Group requests from clients forwarded to the fleet member owning their group "
                "(ListGroups: one per member asked)",
                value=peers.forwarded,
            )


def _traffic(stats: UpstreamStats) -> Iterator[Metric]:
    requests = CounterMetricFamily(
        "groupcoord_upstream_requests",
        "Client requests forwarded to the upstream cluster, by API",
        labels=["api"],
    )
    sent = CounterMetricFamily(
        "groupcoord_upstream_request_bytes",
        "Bytes of client requests forwarded upstream (size prefix included), by API",
        labels=["api"],
    )
    received = CounterMetricFamily(
        "groupcoord_upstream_response_bytes",
        "Bytes of upstream responses to forwarded requests (size prefix included), by API",
        labels=["api"],
    )
    duration = HistogramMetricFamily(
        "groupcoord_upstream_request_duration_seconds",
        "Forwarded request written upstream -> its response received (the whole response; for a "
        "large one streamed through, its first bytes), by API",
        labels=["api"],
    )
    for api_key, traffic in sorted(stats.apis.items()):
        label = [_label(api_key)]
        requests.add_metric(label, traffic.requests)
        sent.add_metric(label, traffic.request_bytes)
        received.add_metric(label, traffic.response_bytes)
        duration.add_metric(
            label, cumulative_buckets(traffic.buckets, REQUEST_BUCKETS_S), traffic.sum_ns / NS
        )
    yield from (requests, sent, received, duration)
